"""Where a GitHub ledger's CI installs GoodWoolf from: a pinned source pip can fetch, never a bare
version number (the package index does not serve goodwoolf).

Usage:
    spec = pinned_source("git+https://github.com/owner/goodwoolf@<40 hex>")   # checked, returned
    spec = pinned_source(None)       # detected from this installation, or None when it cannot be
    check_source(spec)               # UsageError unless a git URL at a commit or a wheel with sha256

Two forms, both fixed to exact bytes:
    git+https://HOST/PATH@<40-hex commit>           pip installs that commit
    https://HOST/PATH/goodwoolf-...whl#sha256=<64 hex>   ci/install.sh downloads it and checks the hash
(``file://`` is accepted too, for a runner's own disk and for tests.) Detection reads PEP 610's
direct_url.json of the installed distribution: a VCS install names its commit, a wheel install its
hash; an editable install from a git checkout whose ``origin`` is an https URL pins that checkout's
HEAD (which must be pushed there). The spec goes into a shell script: only URL-safe characters.
"""

from __future__ import annotations

import json
import re
import subprocess
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from woolf.errors import UsageError

_URL = r"[A-Za-z0-9._~:/%+-]+"
GIT = re.compile(rf"git\+(https|file)://{_URL}@[0-9a-f]{{40}}")
WHEEL = re.compile(rf"(https|file)://{_URL}\.whl#sha256=[0-9a-f]{{64}}")
FORMS = "git+https://HOST/PATH@<40-hex commit>, or https://HOST/PATH/NAME.whl#sha256=<64 hex>"


def check_source(spec: str) -> str:
    if not (GIT.fullmatch(spec) or WHEEL.fullmatch(spec)):
        raise UsageError(f"--woolf-source {spec!r} is not a pinned source pip can fetch",
                         hint=f"give {FORMS}")
    return spec


def pinned_source(explicit: str | None = None) -> str | None:
    """``explicit`` checked, else what this installation of goodwoolf came from, else None."""
    if explicit:
        return check_source(explicit)
    try:
        text = metadata.distribution("goodwoolf").read_text("direct_url.json")
        info = json.loads(text) if text else None
    except (metadata.PackageNotFoundError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("url"), str):
        return None
    url, vcs, archive = info["url"], info.get("vcs_info"), info.get("archive_info")
    candidates = []
    if isinstance(vcs, dict) and vcs.get("vcs") == "git":
        candidates.append(f"git+{url}@{vcs.get('commit_id')}")
    elif isinstance(archive, dict):
        digest = (archive.get("hashes") or {}).get("sha256") or str(archive.get("hash", "")).removeprefix("sha256=")
        candidates.append(f"{url}#sha256={digest}")
    elif url.startswith("file://"):
        candidates.append(_checkout_source(Path(unquote(urlparse(url).path))))
    for spec in candidates:
        if spec and (GIT.fullmatch(spec) or WHEEL.fullmatch(spec)):
            return spec
    return None


def _checkout_source(path: Path) -> str | None:
    """An editable install's checkout: its origin (https only) at HEAD."""
    def git(*args):
        out = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    origin, head = git("remote", "get-url", "origin"), git("rev-parse", "HEAD")
    if not origin.startswith("https://"):
        return None
    return f"git+{origin}@{head}"
