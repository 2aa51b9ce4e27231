"""The hub's receipt log: in which order, and by which clock, the hub received each PR.

Usage:
    order = read_receipts(git)            # {sub_id: (receipt number, position in it)}
    commit = receipt_commit(git, sub_id)  # the receipt commit that first lists sub_id (the hub's clock)
    signed = read_signed(git)             # ids whose head the hub found signed by their contributor's key
    RECEIPTS                              # refs/woolf/pr/receipts, fetched with the PR refs

`woolf hub init` installs a post-receive hook (woolf/hub/receipts.py) that, after
every push creating PR heads, appends one commit to `refs/woolf/pr/receipts`: its
parent is the previous receipt, its tree empty, its committer time the hub's clock,
and its trailers `Woolf-Receipt: <n>` (consecutive from 1) and `Woolf-Received: [ids]`
(the PR ids whose heads that push created, in the order pushed), and `Woolf-Signed: [ids]`
(those of them signed by the key of the contributor they name). No push may write
the ref (the pre-receive hook accepts only PR ids under refs/woolf/pr/), so its order
is the hub's, never a submitter's: validators order the queue by it (the front-running
tie, docs/protocol.md#threats), and the pre-receive hook counts open PRs by it (whose quota
each uses, woolf/protocol/rules/flood.py) without verifying every open head again.
A PR received before the hub had the hook has no receipt and keeps its clone's order.
This module is the log's one reader: the queue's order (forges/local.py), the hook's count of open
PRs (protocol/rules/flood.py) and the re-training draw (validator/retrain.py) all ask it.
"""

from __future__ import annotations

import json
import re

from woolf.protocol import layout

RECEIPTS = f"{layout.PR_PREFIX}/receipts"  # not a submission id: no push can create or move it
MAX_RECEIPTS = 200_000  # receipt commits read per listing (a flood's pushes are bounded, too)
_NUM = re.compile(r"^Woolf-Receipt: ([0-9]{1,12})$", re.M)
_IDS = re.compile(r"^Woolf-Received: (\[.*\])$", re.M)
_SIGNED = re.compile(r"^Woolf-Signed: (\[.*\])$", re.M)
_CACHE: dict[str, tuple[dict, dict, set]] = {}  # receipt tip -> (order, commits, signed): a commit id names
# its history


def read_receipts(git, ref: str = RECEIPTS) -> dict[str, tuple[int, int]]:
    """{sub_id: (receipt number, position)}: the first receipt of each id counts. Read once per tip."""
    return _read(git, ref)[0]


def receipt_commit(git, sub_id: str, ref: str = RECEIPTS) -> str | None:
    """The commit of the hub's receipt that first lists ``sub_id`` (its committer time is the hub's
    clock: no submitter knows it before the push lands); None without one."""
    return _read(git, ref)[1].get(sub_id)


def read_signed(git, ref: str = RECEIPTS) -> set[str]:
    """The PR ids the hub recorded as signed by the key of the contributor each names."""
    return _read(git, ref)[2]


def _ids(pattern, message: str) -> list[str]:
    m = pattern.search(message)
    try:
        found = json.loads(m.group(1)) if m else []
    except ValueError:
        return []
    return [i for i in found if isinstance(i, str) and layout.SUBMISSION_ID.match(i)] if isinstance(found, list) else []


def _read(git, ref: str) -> tuple[dict, dict, set]:
    """(order, commits, signed): each id's (number, position) and receipt commit where it is first
    listed, and the ids recorded as signed."""
    tip = git.rev_parse(ref)
    if tip is None:
        return {}, {}, set()
    if tip in _CACHE:
        return _CACHE[tip]
    proc = git.run("log", "--first-parent", f"--max-count={MAX_RECEIPTS}", "--format=%H%x01%B%x00", tip,
                   check=False)
    order: dict[str, tuple[int, int]] = {}
    commits: dict[str, str] = {}
    signed: set[str] = set()
    for entry in proc.stdout.decode(errors="replace").split("\x00"):
        commit, _, message = entry.lstrip("\n").partition("\x01")
        num = _NUM.search(message)
        if not num:
            continue
        for pos, sub_id in enumerate(_ids(_IDS, message)):
            key = (int(num.group(1)), pos)
            if key < order.get(sub_id, (1 << 62, 0)):
                order[sub_id], commits[sub_id] = key, commit
        signed.update(_ids(_SIGNED, message))
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[tip] = (order, commits, signed)
    return order, commits, signed
