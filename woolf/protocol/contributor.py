"""Who is contributing: a short, ref-safe contributor id.

Usage:
    contributor_id(explicit=None, git=ledger.git)   # WOOLF_CONTRIBUTOR, git user.name, or $USER
    who, source = contributor_source(None, ledger.git)   # source == OS_USER: none of them was set
    claimed_contributor(pr_id, meta.get("contributor"))  # the name a PR is counted as, or None
    gone = unclaimed(git, {pr_id: (name, head)}, signers_text)   # the ids whose keyed name is not theirs
"""

from __future__ import annotations

import getpass
import os
import re

from woolf.errors import UsageError
from woolf.protocol import layout
from woolf.protocol.layout import CONTRIBUTOR
from woolf.protocol.signatures import signatures
from woolf.protocol.signers import Signers


def normalize(name: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", name.strip().lower()).strip("-._")[:39]
    if not CONTRIBUTOR.match(slug):
        raise UsageError(f"contributor name {name!r} has no usable characters",
                         hint="set --contributor or WOOLF_CONTRIBUTOR to letters and digits")
    return slug


OS_USER = "the OS user"  # the fallback, which commands say once


def contributor_source(explicit: str | None = None, git=None) -> tuple[str, str]:
    """The contributor id and where it came from: "--contributor", "WOOLF_CONTRIBUTOR",
    "git user.name", or OS_USER when none of them is set."""
    if explicit:
        return normalize(explicit), "--contributor"
    if os.environ.get("WOOLF_CONTRIBUTOR"):
        return normalize(os.environ["WOOLF_CONTRIBUTOR"]), "WOOLF_CONTRIBUTOR"
    name = git.run("config", "user.name", check=False).stdout.decode().strip() if git is not None else ""
    if name:
        return normalize(name), "git user.name"
    return normalize(getpass.getuser() or "anonymous"), OS_USER


def contributor_id(explicit: str | None = None, git=None) -> str:
    return contributor_source(explicit, git)[0]


def claimed_contributor(sub_id: str, claim) -> str | None:
    """The contributor a PR is counted, queued, listed and rated as: the name in submission.json only
    when its id names the same one (a mismatch is rejected by the validator and charged to nobody,
    so junk that claims someone else's name costs her neither a queue slot nor a rating)."""
    if not isinstance(claim, str) or not layout.SUBMISSION_ID.match(sub_id):
        return None
    return claim if sub_id.split("-", 1)[1].rsplit("-", 1)[0] == claim else None


def unclaimed(git, claims: dict, text: bytes | None) -> set:
    """The keys of ``claims`` ({key: (contributor, head commit)}) whose contributor has a key in the
    allowed_signers ``text`` but whose head that key did not sign: a name that has a key is claimed
    only by its signature, so such a PR is nobody's (never queued, listed or rated as hers). One
    batch of signature checks for the heads that need one."""
    if text is None or not claims:
        return set()
    try:
        keyed = {s.name for s in Signers.parse(text.decode(errors="replace")).entries}
    except Exception:  # noqa: BLE001 - a malformed allowed_signers: the chain check reports it
        return set()
    need = {k: v for k, v in claims.items() if v[0] in keyed and v[1]}
    found = signatures(git, {head: text for _, head in need.values()}) if need else {}
    return {k for k, (name, head) in need.items() if found.get(head, ("N", "")) != ("G", name)}
