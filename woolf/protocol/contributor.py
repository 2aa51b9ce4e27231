"""Who is contributing: a short, ref-safe contributor id.

Usage:
    contributor_id(explicit=None, git=ledger.git)   # WOOLF_CONTRIBUTOR, git user.name, or $USER
    claimed_contributor(pr_id, meta.get("contributor"))  # the name a PR is counted as, or None
"""

from __future__ import annotations

import getpass
import os
import re

from woolf.errors import UsageError
from woolf.protocol import layout
from woolf.protocol.layout import CONTRIBUTOR


def normalize(name: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", name.strip().lower()).strip("-._")[:39]
    if not CONTRIBUTOR.match(slug):
        raise UsageError(f"contributor name {name!r} has no usable characters",
                         hint="set --contributor or WOOLF_CONTRIBUTOR to letters and digits")
    return slug


def contributor_id(explicit: str | None = None, git=None) -> str:
    name = explicit or os.environ.get("WOOLF_CONTRIBUTOR")
    if not name and git is not None:
        name = git.run("config", "user.name", check=False).stdout.decode().strip()
    return normalize(name or getpass.getuser() or "anonymous")


def claimed_contributor(sub_id: str, claim) -> str | None:
    """The contributor a PR is counted, queued, listed and rated as: the name in submission.json only
    when its id names the same one (a mismatch is rejected by the validator and charged to nobody,
    so junk that claims someone else's name costs her neither a queue slot nor a rating)."""
    if not isinstance(claim, str) or not layout.SUBMISSION_ID.match(sub_id):
        return None
    return claim if sub_id.split("-", 1)[1].rsplit("-", 1)[0] == claim else None
