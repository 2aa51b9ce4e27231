"""Layer 5: where PRs live. A Forge (base.py) is opened, listed, read, commented on, closed and marked
merged; local.py keeps PRs as refs in the origin (no server), github.py talks to GitHub, Gitea and
Forgejo through their REST API (github_api.py, which alone imports requests).

Usage:
    from woolf.forges import forge_for
    forge = forge_for(ledger)                 # the config's forge.kind, or "local" / "github"
    for pr in forge.list_open(): ...
"""

from __future__ import annotations

import os

from woolf.errors import ForgeError
from woolf.forges.base import Forge
from woolf.forges.github import GitHubForge
from woolf.forges.local import LocalForge

__all__ = ["Forge", "forge_for"]


def forge_for(ledger, kind: str | None = None) -> Forge:
    """The forge the ledger's config (or --forge) selects."""
    kind = kind or ledger.config.forge.kind
    if kind == "local":
        return LocalForge.for_ledger(ledger)
    if kind == "github":
        remotes = ledger.git.out("remote").split()
        fork = os.environ.get("WOOLF_FORK_REMOTE") or ("fork" if "fork" in remotes else None)
        return GitHubForge(ledger.git, ledger.config.forge, fork_remote=fork,
                           fork_owner=os.environ.get("WOOLF_FORK_OWNER"))
    raise ForgeError(f"unknown forge {kind!r}", hint="use 'local' or 'github'")
