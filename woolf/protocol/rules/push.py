"""Which ref updates a hub accepts: the rules its pre-receive hook applies to one push.

Usage:
    errors = check_push(git, [(old, new, ref), ...])     # [] when the whole push may land

- `refs/heads/main`: never created or deleted here; moves only forward along its
  own first-parent chain, and every new commit on that chain is a version commit
  numbered one more than its parent, of the right shape and (on a signed ledger)
  signed by a key with the right role (woolf/protocol/rules/main.py);
- `refs/woolf/pr/<id>/head`: a commit, created once, never moved or deleted; one push opens at
  most PUSH_MAX_NEW_PRS, a contributor holds at most `queue.max_open_per_contributor` open, and
  keyless (or unsigned) PRs together at most OPEN_KEYLESS_MAX (woolf/protocol/rules/flood.py);
- `refs/woolf/pr/<id>/verdict`: created once, for an existing PR; `merged` is the
  version commit landing on main; `rejected` is a commit on the head signed by a
  validator; `withdrawn` is signed by a validator or by the PR's own contributor, and carries only the
  trailers `woolf pr withdraw` writes (Verdict, Submission, Reason, Closed-By; short, printable);
- `refs/woolf/pr/<id>/comments`: created, or moved forward, by comment commits only (one parent,
  the head's tree, a short message);
- `refs/woolf/pr/<id>/votes/<name>`: a validator's votes (woolf/protocol/votes.py), for an
  existing PR; each new vote's one parent is the head (first vote) or the ref's old tip, and
  it is signed by the validator key named <name>; never deleted;
- a vote's commit time is within MAX_SKEW of the hub's clock when it lands (so expiry, timed from
  the first vote, rests on the hub's clock: a back-dated vote is refused);
- `expired` verdicts (no quorum in time) name every validator's latest vote on the PR, from at least
  `validators.quorum` distinct validators whose votes do not agree (one validator below the quorum
  cannot expire a PR alone), and are committed at least `validators.vote_timeout` after the first
  vote, near the hub's clock; under `validators.quorum`
  k > 1 `rejected` ones name k agreeing reject votes (woolf/protocol/rules/quorum.py);
- `refs/woolf/pr/<id>/challenge/<name>` and `refs/woolf/pr/<id>/answer`: a drawn PR's proof of
  training, a validator's challenge and the participant's answer (woolf/protocol/rules/proof.py);
- `refs/woolf/task/<id>`: a training task's records (woolf/protocol/rules/tasks.py);
- `refs/heads/woolf/<id>` (forge.kind = "github" only: the PR branch): created once;
- nothing else;
- and outside main, a push adds at most PUSH_MAX_OBJECTS new objects of PUSH_MAX_BYTES
  together, no commit over COMMIT_MAX_BYTES (git's receive.maxInputSize, set by
  `woolf hub init`, bounds the pack itself before this hook runs).

"Signed by" is checked against the allowed_signers on main before the push.
"""

from __future__ import annotations

import re
import time

from woolf.errors import ConfigError, WoolfError
from woolf.git.commits import read_commit
from woolf.git.repo import COMMIT_MAX_BYTES
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.rules.flood import comments_problem, flood_problems, head_problem
from woolf.protocol.rules.main import chain_problems
from woolf.protocol.rules.proof import answer_problems, challenge_problems
from woolf.protocol.rules.quorum import expiry_problem, rejection_quorum_problem
from woolf.protocol.rules.tasks import MAX_SKEW, check_task
from woolf.protocol.signatures import role_problem, signatures
from woolf.protocol.signers import Signers, signers_text
from woolf.protocol.tasks import TASK_PREFIX
from woolf.protocol.trailers import int_field, parse_message
from woolf.protocol.votes import parse_vote, verify_voters

ZERO = "0" * 40
PUSH_MAX_BYTES = 32 << 20  # all new objects of one push under PR, vote and task refs, uncompressed
PUSH_MAX_OBJECTS = 10_000
_PR_REF = re.compile(r"^refs/woolf/pr/([^/]+)/(head|verdict|comments)$")
_VOTE_REF = re.compile(r"^refs/woolf/pr/([^/]+)/votes/([^/]+)$")
_CHALLENGE_REF = re.compile(r"^refs/woolf/pr/([^/]+)/challenge/([^/]+)$")
_ANSWER_REF = re.compile(r"^refs/woolf/pr/([^/]+)/answer$")
_GH_BRANCH = re.compile(r"^refs/heads/woolf/([^/]+)$")


def check_push(git, updates: list[tuple[str, str, str]]) -> list[str]:
    main = git.rev_parse(layout.MAIN)
    new_main = next((new for old, new, ref in updates if ref == layout.MAIN), None)
    pushed = {ref: new for _, new, ref in updates}
    errors = _size_problems(git, [new for _, new, ref in updates if ref != layout.MAIN and new != ZERO])
    errors = errors or flood_problems(git, updates, main)
    if errors:
        return errors  # nothing of an oversized push, or of one opening too many PRs, is read further
    _warm_signatures(git, updates, main)
    for old, new, ref in updates:
        try:
            errors += [f"{ref}: {e}" for e in _check_one(git, old, new, ref, main, new_main, pushed)]
        except WoolfError as exc:  # an object no rule can read (too large, no commit, bad signers)
            errors.append(f"{ref}: cannot be checked, so it is refused: {exc.message}")
    return errors


def _warm_signatures(git, updates, main) -> None:
    """Verify every verdict and vote of the push in one batch (one git process; results remembered),
    so a validator's batch of 64 rejections costs the hook one verification run, not 64."""
    text = signers_text(git, main) if main else None
    tips = [new for _, new, ref in updates if new != ZERO and ref.startswith(f"{layout.PR_PREFIX}/")
            and not ref.endswith("/head") and re.fullmatch(r"[0-9a-f]{40}", new)]
    if text is not None and tips:
        signatures(git, {t: text for t in tips})


def _size_problems(git, tips: list[str]) -> list[str]:
    """What a push adds under PR, vote and task refs is bounded: at most PUSH_MAX_OBJECTS new objects
    of PUSH_MAX_BYTES together (uncompressed), each new commit at most COMMIT_MAX_BYTES. An honest PR
    adds one commit, two trees and two small files; its delta goes to storage, never into git."""
    tips = [t for t in tips if re.fullmatch(r"[0-9a-f]{40}", t)]
    if not tips:
        return []
    proc = git.run("rev-list", "--objects", "--no-object-names", *tips, "--not", "--all", check=False)
    oids = proc.stdout.split()
    if proc.returncode != 0:
        return ["the pushed objects cannot be listed (a missing object?)"]
    if len(oids) > PUSH_MAX_OBJECTS:
        return [f"this push adds {len(oids)} objects, over the limit of {PUSH_MAX_OBJECTS}"]
    sizes = git.run("cat-file", "--batch-check", input=b"\n".join(oids) + b"\n").stdout.split(b"\n")
    total, problems = 0, []
    for line in sizes:
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            total += int(parts[2])
            if parts[1] == b"commit" and int(parts[2]) > COMMIT_MAX_BYTES:
                problems.append(f"commit {parts[0].decode()[:12]} is {int(parts[2])} bytes, over the limit of "
                                f"{COMMIT_MAX_BYTES}")
    if total > PUSH_MAX_BYTES:
        problems.append(f"this push adds {total} bytes of objects, over the limit of {PUSH_MAX_BYTES}")
    return problems


def _check_one(git, old, new, ref, main, new_main, pushed) -> list[str]:
    if ref == layout.MAIN:
        return _check_main(git, old, new)
    m = _PR_REF.match(ref)
    if m:
        sub_id, kind = m.groups()
        if not layout.SUBMISSION_ID.match(sub_id):
            return [f"{sub_id!r} is not a submission id"]
        if new == ZERO:
            return ["pull-request refs are never deleted"]
        if kind == "comments":
            head = pushed.get(f"{layout.PR_PREFIX}/{sub_id}/head") or git.rev_parse(f"{layout.PR_PREFIX}/{sub_id}/head")
            problem = comments_problem(git, old, new, head)
            return [problem] if problem else []
        if old != ZERO:
            return [f"a PR {kind} is created once and never moved"]
        if kind == "head":
            problem = head_problem(git, new)
            return [problem] if problem else []
        return _check_verdict(git, sub_id, new, main, new_main, pushed)
    if ref.startswith(f"{TASK_PREFIX}/"):  # a training task's records (woolf/protocol/rules/tasks.py)
        return check_task(git, ref[len(TASK_PREFIX) + 1:], old, new, main)
    m = _VOTE_REF.match(ref)
    if m:
        return _check_vote(git, m.group(1), m.group(2), old, new, main, pushed)
    m = _CHALLENGE_REF.match(ref)
    if m:  # a proof's challenge and answer (woolf/protocol/rules/proof.py)
        return challenge_problems(git, m.group(1), m.group(2), old, new, main, pushed)
    m = _ANSWER_REF.match(ref)
    if m:
        return answer_problems(git, m.group(1), old, new, main, pushed)
    m = _GH_BRANCH.match(ref)
    if m and _forge_kind(git, main) == "github" and layout.SUBMISSION_ID.match(m.group(1)):
        return [] if old == ZERO and new != ZERO else ["a PR branch is created once and never moved"]
    return ["this hub accepts only main, refs/woolf/pr/<id>/{head,verdict,comments,votes/<name>,"
            "challenge/<name>,answer} and refs/woolf/task/<id>"]


def _forge_kind(git, main) -> str:
    try:
        return parse_config((git.show_bytes(f"{main}:{layout.CONFIG}") or b"").decode()).forge.kind
    except ConfigError:
        return "local"


def _check_main(git, old, new) -> list[str]:
    if old == ZERO or new == ZERO:
        return ["main is never created or deleted by a push"]
    chain = git.out("rev-list", "--first-parent", "--reverse", f"{old}..{new}").split()
    if not chain or read_commit(git, chain[0])[0][:1] != [old]:
        return ["main only moves forward along its first-parent chain (a force-push or rewind is refused)"]
    _, fields = parse_message(git.message(old))
    start = int_field(fields, "Woolf-Version")
    problems = chain_problems(git, chain, None if start is None else start + 1)
    return [f"{c[:12]}: {p}" for c in chain for p in problems[c]]


def _check_verdict(git, sub_id, new, main, new_main, pushed) -> list[str]:
    head = pushed.get(f"{layout.PR_PREFIX}/{sub_id}/head") or git.rev_parse(f"{layout.PR_PREFIX}/{sub_id}/head")
    if head is None:
        return ["a verdict for a pull request that does not exist"]
    parents, message = read_commit(git, new)
    _, fields = parse_message(message)
    if "Woolf-Version" in fields:  # merged: the verdict is the version commit itself
        if fields.get("Woolf-Submission") != sub_id or parents[1:] != [head]:
            return ["a merged verdict must be the version commit that merged this PR's head"]
        if new != new_main:
            return ["a merged verdict lands together with main (one atomic push)"]
        return []  # its signature is checked as part of main's chain
    state = fields.get("Woolf-Verdict")
    if state not in ("rejected", "withdrawn", "expired") or fields.get("Woolf-Submission") != sub_id:
        return ["a verdict commit carries Woolf-Verdict (rejected|withdrawn|expired) and this Woolf-Submission"]
    if parents != [head]:
        return ["a verdict commit's one parent is the PR's head"]
    if state == "withdrawn" and (problem := _withdrawal_problem(message, fields)):
        return [problem]
    if state in ("rejected", "expired"):
        problem = (rejection_quorum_problem(git, sub_id, fields, main) if state == "rejected"
                   else expiry_problem(git, sub_id, fields, new, main, time.time(), _vote_tips(git, sub_id, pushed)))
        if problem:
            return [problem]
    text = signers_text(git, main)
    if text is None:
        return []  # unsigned ledger
    signers = Signers.parse(text.decode(errors="replace"))
    found = signatures(git, {new: text}).get(new)
    problem = role_problem(found, signers, "validator")
    if problem and state == "withdrawn":
        contributor = sub_id.split("-", 1)[1].rsplit("-", 1)[0]
        if found and found[0] == "G" and found[1] == contributor:
            return []
        problem += f"; a withdrawal may also be signed by {contributor}'s own key"
    return [problem] if problem else []


_WITHDRAWAL_KEYS = ("Woolf-Verdict", "Woolf-Submission", "Woolf-Reason", "Woolf-Closed-By")
WITHDRAWAL_MAX_BYTES = 4096


def _withdrawal_problem(message: str, fields: dict) -> str | None:
    """A withdrawal (its own contributor may push it) carries only the trailers `woolf pr withdraw`
    writes, short and printable: nothing a reader must parse as a number or JSON."""
    extra = sorted(set(fields) - set(_WITHDRAWAL_KEYS))
    if extra:
        return f"a withdrawal carries only {', '.join(_WITHDRAWAL_KEYS)} (not {', '.join(extra)[:200]})"
    if len(message.encode()) > WITHDRAWAL_MAX_BYTES:
        return f"a withdrawal's message is at most {WITHDRAWAL_MAX_BYTES} bytes"
    if any(len(v) > 300 or not v.isprintable() for v in fields.values()):
        return "a withdrawal's trailers are one printable line of at most 300 characters each"
    if "Woolf-Closed-By" in fields and not layout.CONTRIBUTOR.match(fields["Woolf-Closed-By"]):
        return "Woolf-Closed-By names a contributor (lower-case letters, digits, . _ -)"
    return None


def _check_vote(git, sub_id, name, old, new, main, pushed) -> list[str]:
    if not layout.SUBMISSION_ID.match(sub_id) or not layout.CONTRIBUTOR.match(name):
        return ["a vote ref is refs/woolf/pr/<submission id>/votes/<validator name>"]
    if new == ZERO:
        return ["votes are never deleted"]
    head = pushed.get(f"{layout.PR_PREFIX}/{sub_id}/head") or git.rev_parse(f"{layout.PR_PREFIX}/{sub_id}/head")
    if head is None:
        return ["a vote on a pull request that does not exist"]
    ballot, why = parse_vote(git, new, sub_id, "loss")
    if ballot is None:
        return [f"not a vote on this PR: {why}"]
    if ballot.validator != name:
        return [f"a vote by {ballot.validator} on {name}'s ref"]
    if read_commit(git, new)[0] != [head if old == ZERO else old]:
        return ["a vote's one parent is the PR's head (first vote) or the validator's previous vote"]
    stamp = git.commit_time(new)
    skew = stamp - time.time() if stamp is not None else float("inf")
    if abs(skew) > MAX_SKEW:  # expiry is timed from the first vote: its time is the hub's, within MAX_SKEW
        return [f"its commit time is {skew:+.0f} s off the hub's clock (at most {MAX_SKEW} s): a vote is "
                "pushed when it is made"]
    _, bad = verify_voters(git, [ballot], signers_text(git, main))
    return [bad[0][1]] if bad else []


def _vote_tips(git, sub_id: str, pushed: dict) -> list[str]:
    """The latest vote of every validator on ``sub_id`` once this push lands."""
    prefix = f"{layout.PR_PREFIX}/{sub_id}/votes/"
    tips = {ref: sha for ref, sha in git.refs(prefix).items()}
    tips.update({ref: sha for ref, sha in pushed.items() if ref.startswith(prefix) and sha != ZERO})
    return sorted(tips.values())
