"""The hub's rules for a proof's challenge and answer refs (called by woolf/protocol/rules/push.py).

Usage:
    errors = challenge_problems(git, sub_id, name, old, new, main, pushed)   # refs/woolf/pr/<id>/challenge/<name>
    errors = answer_problems(git, sub_id, old, new, main, pushed)            # refs/woolf/pr/<id>/answer

- a challenge: for an open PR, a commit whose one parent is the PR's head (the first) or the ref's
  old tip, with the head's tree, at most MAX_CHALLENGES on the ref, a well-formed Woolf-Challenge of
  the validator the ref names, its commit time within MAX_SKEW of the hub's clock and its deadline
  at most 7 days after it; on a signed ledger signed by the validator key of that name;
- an answer: for an open PR, likewise chained (at most MAX_ANSWERS), a well-formed Woolf-Answer,
  its commit time within MAX_SKEW; for a PR whose head its contributor's own key signed, signed by
  that key: a challenge answered by someone else is refused. A keyless PR's answers may come from
  anyone (validators take the first whose states digest to the committed links);
- neither is ever deleted.
"""

from __future__ import annotations

import time

from woolf.git.commits import read_commit
from woolf.protocol import layout
from woolf.protocol.challenge import (
    ANSWER_MAX_BYTES,
    CHALLENGE_MAX_BYTES,
    MAX_ANSWERS,
    MAX_CHALLENGES,
    parse_answer,
    parse_challenge,
)
from woolf.protocol.rules.flood import signed_by_own_key
from woolf.protocol.rules.tasks import MAX_SKEW
from woolf.protocol.signatures import role_problem, signatures
from woolf.protocol.signers import Signers, signers_text

ZERO = "0" * 40
MAX_DEADLINE = 7 * 86400


def _chained(git, sub_id: str, kind: str, old: str, new: str, pushed: dict, most: int, max_bytes: int):
    """(head, message, problem): the common rules of a challenge or answer commit."""
    if new == ZERO:
        return None, "", f"{kind}s are never deleted"
    head = pushed.get(f"{layout.PR_PREFIX}/{sub_id}/head") or git.rev_parse(f"{layout.PR_PREFIX}/{sub_id}/head")
    if head is None:
        return None, "", f"a {kind} for a pull request that does not exist"
    if git.rev_parse(f"{layout.PR_PREFIX}/{sub_id}/verdict") or pushed.get(f"{layout.PR_PREFIX}/{sub_id}/verdict"):
        return None, "", f"a {kind} for a pull request that is settled"
    info = git.object_info(new)
    if info is None or info[1] != "commit" or info[2] > max_bytes:
        return None, "", f"a {kind} is a commit of at most {max_bytes} bytes"
    parents, message = read_commit(git, new)
    if parents != [head if old == ZERO else old]:
        return None, "", f"a {kind}'s one parent is the PR's head (the first) or the ref's previous {kind}"
    if git.rev_parse(f"{new}^{{tree}}") != git.rev_parse(f"{head}^{{tree}}"):
        return None, "", f"a {kind} carries the PR head's tree"
    count = int(git.out("rev-list", "--count", new, f"^{head}") or 0)
    if count > most:
        return None, "", f"a PR holds at most {most} {kind}s on one ref"
    stamp = git.commit_time(new)
    skew = stamp - time.time() if stamp is not None else float("inf")
    if abs(skew) > MAX_SKEW:  # deadlines are on the hub's clock
        return None, "", (f"its commit time is {skew:+.0f} s off the hub's clock (at most {MAX_SKEW} s): a {kind} "
                          "is pushed when it is made")
    return head, message, None


def challenge_problems(git, sub_id: str, name: str, old: str, new: str, main: str | None, pushed: dict) -> list[str]:
    if not layout.SUBMISSION_ID.match(sub_id) or not layout.CONTRIBUTOR.match(name):
        return ["a challenge ref is refs/woolf/pr/<submission id>/challenge/<validator name>"]
    _, message, problem = _chained(git, sub_id, "challenge", old, new, pushed, MAX_CHALLENGES, CHALLENGE_MAX_BYTES)
    if problem:
        return [problem]
    c, why = parse_challenge(message, sub_id)
    if c is None:
        return [f"not a challenge on this PR: {why}"]
    if c.validator != name:
        return [f"a challenge by {c.validator} on {name}'s ref"]
    if not 0 < c.deadline - (git.commit_time(new) or 0) <= MAX_DEADLINE:
        return [f"a challenge's deadline is after its commit time, by at most {MAX_DEADLINE} s"]
    text = signers_text(git, main) if main else None
    if text is None:
        return []  # unsigned ledger
    found = signatures(git, {new: text}).get(new)
    problem = role_problem(found, Signers.parse(text.decode(errors="replace")), "validator")
    if problem:
        return [problem]
    return [] if found[1] == name else [f"signed by {found[1]}, not by the validator {name} the ref names"]


def answer_problems(git, sub_id: str, old: str, new: str, main: str | None, pushed: dict) -> list[str]:
    if not layout.SUBMISSION_ID.match(sub_id):
        return [f"{sub_id!r} is not a submission id"]
    head, message, problem = _chained(git, sub_id, "answer", old, new, pushed, MAX_ANSWERS, ANSWER_MAX_BYTES)
    if problem:
        return [problem]
    a, why = parse_answer(message, sub_id)
    if a is None:
        return [f"not an answer on this PR: {why}"]
    text = signers_text(git, main) if main else None
    if text is None or not signed_by_own_key(git, {sub_id: head}, text):
        return []  # a keyless PR: an answer counts on its content alone (validators check it)
    who = sub_id.split("-", 1)[1].rsplit("-", 1)[0]
    found = signatures(git, {new: text}).get(new, ("N", ""))
    if found[0] != "G" or found[1] != who:
        return [f"{who}'s PR is signed by {who}'s key: only {who} answers its challenges (this answer is "
                f"{'signed by ' + found[1] if found[0] == 'G' else 'not signed'})"]
    return []
