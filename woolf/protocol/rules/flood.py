"""How many PRs one push, one contributor and all keyless contributors may open on a hub; what a
PR's head and comments may be. Called by woolf/protocol/rules/push.py (the pre-receive hook).

Usage:
    errors = flood_problems(git, updates, main)       # [] when the push's new PR heads fit
    problem = head_problem(git, new)                  # a PR head is a commit
    problem = comments_problem(git, sub_id, old, new, head)

- one push creates at most PUSH_MAX_NEW_PRS PR heads;
- a contributor has at most `queue.max_open_per_contributor` (main's config) open PRs on the hub
  (open: a head without a verdict); a PR naming a contributor who has a key in allowed_signers
  counts as hers only when its head is signed by that key (the receipt log records which were,
  woolf/protocol/receipts.py); every other PR is keyless;
- all keyless PRs together: at most OPEN_KEYLESS_MAX open. A flood of junk under fresh names
  fills this bucket and no other: signed contributors' PRs still land and validators serve them
  first (woolf/validator/queue.py). What a validator pays for the flood is bounded by the bucket.
"""

from __future__ import annotations

import re
from collections import Counter

from woolf.errors import ConfigError
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.receipts import read_signed
from woolf.protocol.signatures import signatures
from woolf.protocol.signers import Signers, signers_text

ZERO = "0" * 40
PUSH_MAX_NEW_PRS = 16
OPEN_KEYLESS_MAX = 128  # at ~0.25 s of a validator's time per junk PR: a full bucket costs it ~30 s
COMMENTS_MAX_NEW = 64  # comment commits one push may add to one PR
COMMENT_MAX_BYTES = 16 * 1024
_HEAD = re.compile(r"^refs/woolf/pr/([^/]+)/head$")
_ANY = re.compile(r"^refs/woolf/pr/([^/]+)/(head|verdict)$")


def _who(sub_id: str) -> str:
    return sub_id.split("-", 1)[1].rsplit("-", 1)[0]


def keyed_names(git, main: str | None) -> tuple[set[str], bytes | None]:
    text = signers_text(git, main) if main else None
    if text is None:
        return set(), None
    try:
        return {s.name for s in Signers.parse(text.decode(errors="replace")).entries}, text
    except ConfigError:
        return set(), text


def signed_by_own_key(git, heads: dict[str, str], text: bytes | None) -> set[str]:
    """The ids in ``heads`` ({id: head}) whose head is signed by the key of the contributor it names."""
    if text is None or not heads:
        return set()
    found = signatures(git, {h: text for h in heads.values()})
    return {i for i, h in heads.items() if found.get(h, ("N", ""))[0] == "G" and found[h][1] == _who(i)}


def flood_problems(git, updates: list[tuple[str, str, str]], main: str | None) -> list[str]:
    new = {m.group(1): n for o, n, r in updates if o == ZERO and n != ZERO and (m := _HEAD.match(r))
           and layout.SUBMISSION_ID.match(m.group(1))}
    if not new:
        return []
    if len(new) > PUSH_MAX_NEW_PRS:
        return [f"this push opens {len(new)} PRs, over the limit of {PUSH_MAX_NEW_PRS} per push"]
    names, text = keyed_names(git, main)
    try:
        limit = parse_config((git.show_bytes(f"{main}:{layout.CONFIG}") or b"").decode()).queue.max_open_per_contributor
    except ConfigError:
        limit = 64
    kinds: dict[str, set[str]] = {}
    for ref in git.refs(f"{layout.PR_PREFIX}/"):
        m = _ANY.match(ref)
        if m and layout.SUBMISSION_ID.match(m.group(1)):
            kinds.setdefault(m.group(1), set()).add(m.group(2))
    open_ids = [i for i, k in kinds.items() if k == {"head"} and i not in new]
    signed = read_signed(git) | signed_by_own_key(git, new, text)

    def owner(sub_id):  # whose quota a PR uses: its contributor's when it can be hers, else nobody's
        who = _who(sub_id)
        return who if who not in names or sub_id in signed else None

    held = Counter(owner(i) for i in open_ids)
    keyless = sum(1 for i in open_ids if _who(i) not in names or i not in signed)
    errors = []
    for sub_id in new:
        who, mine = _who(sub_id), owner(sub_id)
        if mine is not None:
            held[mine] += 1
            if held[mine] > limit:
                how = ("withdraw some (`woolf pr withdraw`)" if who in names else
                       "an unsigned name is anyone's to fill, so sign with a key listed in ledger/allowed_signers "
                       "(its PRs count apart), or submit under another name")  # keyless cannot withdraw
                errors.append(f"{who} has {held[mine] - 1} open PRs on this hub; queue.max_open_per_contributor is "
                              f"{limit}: wait for verdicts, or {how}")
        if mine is None or who not in names:
            keyless += 1
            if keyless > OPEN_KEYLESS_MAX:
                errors.append(f"{OPEN_KEYLESS_MAX} PRs of contributors without a key in allowed_signers (or unsigned) "
                              "are open on this hub: wait for verdicts, or sign with a listed key")
    return list(dict.fromkeys(errors))


def head_problem(git, new: str) -> str | None:
    info = git.object_info(new)
    if info is None or info[1] != "commit":
        return f"a PR head is a commit (this is a {info[1] if info else 'missing object'})"
    return None


def comments_problem(git, old: str, new: str, head: str | None) -> str | None:
    """A PR's comments are a chain of commits on its head, each with the head's tree and one parent, a
    short message and nothing else: no one may hang other objects on the PR."""
    if head is None:
        return "comments on a pull request that does not exist"
    base = head if old == ZERO else old
    if old != ZERO and not git.is_ancestor(old, new):
        return "comments only move forward"
    info = git.object_info(new)
    if info is None or info[1] != "commit":
        return "a comment is a commit"
    chain = git.out("rev-list", f"--max-count={COMMENTS_MAX_NEW + 1}", f"{base}..{new}").split()
    if len(chain) > COMMENTS_MAX_NEW:
        return f"a push adds at most {COMMENTS_MAX_NEW} comments to a PR"
    tree = git.out("rev-parse", f"{head}^{{tree}}")
    rows = git.out("log", "--no-walk=unsorted", "--format=%H %T %P", *chain).splitlines() if chain else []
    sizes = {p[0]: int(p[2]) for p in (ln.split() for ln in git.out(
        "cat-file", "--batch-check", input=("\n".join(chain) + "\n").encode()).splitlines()) if len(p) == 3}
    for row in rows:
        parts = row.split()
        if len(parts) != 3 or parts[1] != tree:
            return "a comment commit has one parent and the PR head's tree (no files of its own)"
        if sizes.get(parts[0], 0) > COMMENT_MAX_BYTES:
            return f"a comment is at most {COMMENT_MAX_BYTES} bytes"
    if chain and read_first_parent(git, chain[-1]) != base:
        return "comments start on the PR's head (or its previous comment)"
    return None


def read_first_parent(git, commit: str) -> str | None:
    parts = git.out("log", "-1", "--format=%P", commit).split()
    return parts[0] if parts else None
