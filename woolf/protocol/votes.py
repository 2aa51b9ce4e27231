"""Votes: signed commits on a validator's own ref under a PR, read as attacker-written.

Usage:
    ref = vote_ref(sub_id, "v1")                                  # refs/woolf/pr/<id>/votes/v1
    ballot = cast(ledger, pr, main_commit, "v1", fields, subject) # commit + push (lease on the old tip)
    ballot, old = make_vote(...); push_vote(ledger, pr, ballot, old)   # the same in two steps
    ballots, ignored = read_votes(git, sub_id, signers_text, "loss")
    ballot, why = parse_vote(git, sha, sub_id, "loss")            # one vote commit, or why it is none

A vote is a commit whose one parent is the PR's head (a validator's first vote)
or that validator's previous vote, with the head's tree and the trailers
`Woolf-Vote: accept|reject`, `Woolf-Submission`, `Woolf-Main` (the main commit
it was evaluated against), `Woolf-Candidate-Sha256` (accept), the metrics,
reason, `Woolf-Voter` and timings. On a signed ledger it counts only when
signed by a validator key whose name in allowed_signers is the ref's last
component; a vote by a key removed from allowed_signers no longer counts.
"""

from __future__ import annotations

import re

from woolf.errors import ConfigError, ForgeError
from woolf.protocol import layout
from woolf.protocol.signatures import role_problem, signatures
from woolf.protocol.signers import Signers
from woolf.protocol.tally import DECISIONS, Ballot
from woolf.protocol.trailers import format_message, json_field, parse_message

VOTE_MAX_BYTES = 64 * 1024  # a vote commit's size, checked before it is read
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def vote_ref(sub_id: str, voter: str) -> str:
    return f"{layout.PR_PREFIX}/{sub_id}/votes/{voter}"


_PARSED: dict[tuple[str, str, str], tuple[Ballot | None, str | None]] = {}  # a commit id names its bytes


def parse_vote(git, sha: str, sub_id: str, metric: str) -> tuple[Ballot | None, str | None]:
    """(Ballot with the voter the commit names, None) or (None, why it is no vote). Unsigned-checked.

    Remembered per (commit id, PR, metric) for the life of the process: the tally, the trust
    check and the hook's rules read the same votes again; a missing object is never remembered."""
    key = (sha, sub_id, metric)
    if key in _PARSED:
        return _PARSED[key]
    info = git.object_info(sha)
    if info is None or info[1] != "commit":
        return None, f"not a commit ({info[1] if info else 'missing'})"
    if info[2] > VOTE_MAX_BYTES:
        out = None, f"a vote commit of {info[2]} bytes (limit {VOTE_MAX_BYTES})"
    else:
        out = ballot_of(git.message(sha), sha, sub_id, metric)
    if _HEX40.match(sha):
        if len(_PARSED) > 65536:
            _PARSED.clear()
        _PARSED[key] = out
    return out


def ballot_of(message: str, sha: str, sub_id: str, metric: str) -> tuple[Ballot | None, str | None]:
    """parse_vote's reading of a vote commit's message (its size already checked)."""
    _, f = parse_message(message)
    decision, voter = f.get("Woolf-Vote"), f.get("Woolf-Voter") or ""
    if decision not in DECISIONS:
        return None, "no Woolf-Vote: accept|reject trailer"
    if f.get("Woolf-Submission") != sub_id:
        return None, f"a vote on another PR ({str(f.get('Woolf-Submission'))[:80]!r})"
    if not layout.CONTRIBUTOR.match(voter):
        return None, "no valid Woolf-Voter"
    main = f.get("Woolf-Main") or ""
    if not _HEX40.match(main):
        return None, "no Woolf-Main commit"
    candidate = f.get("Woolf-Candidate-Sha256")
    if decision == "accept" and not (isinstance(candidate, str) and _HEX64.match(candidate)):
        return None, "an accept without a Woolf-Candidate-Sha256"
    after = json_field(f, "Woolf-Metrics-After")
    value = after.get(metric) if isinstance(after, dict) else None
    value = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    timings = json_field(f, "Woolf-Timings")
    seconds = timings.get("evaluation") if isinstance(timings, dict) else None
    seconds = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else None
    return Ballot(voter, sha, decision, candidate if decision == "accept" else None, value, main, seconds), None


def verify_voters(git, ballots: list[Ballot], text: bytes | None) -> tuple[list[Ballot], list[tuple[str, str]]]:
    """The ballots signed by a validator key named as their voter; (commit, why) for the others.

    ``text``: the allowed_signers in force (None: an unsigned ledger, where votes are not
    authenticated and count by the name they carry)."""
    if text is None:
        return ballots, []
    try:
        signers = Signers.parse(text.decode(errors="replace"))
    except ConfigError as exc:
        return [], [(b.commit, f"allowed_signers is malformed: {exc.message}") for b in ballots]
    found = signatures(git, {b.commit: text for b in ballots}) if ballots else {}
    good, bad = [], []
    for b in ballots:
        problem = role_problem(found.get(b.commit), signers, "validator")
        if problem is None and found[b.commit][1] != b.validator:
            problem = f"signed by {found[b.commit][1]} but cast as {b.validator}'s vote"
        (bad.append((b.commit, problem)) if problem else good.append(b))
    return good, bad


def read_votes(git, sub_id: str, text: bytes | None, metric: str) -> tuple[list[Ballot], list[tuple[str, str]]]:
    """Each validator's latest counted vote on ``sub_id``, and (ref, why) for every vote ref ignored."""
    prefix = f"{layout.PR_PREFIX}/{sub_id}/votes/"
    ballots, ignored, ref_of = [], [], {}
    for ref, (sha, _) in sorted(git.refs_typed(prefix).items()):
        name = ref[len(prefix):]
        if not layout.CONTRIBUTOR.match(name):
            ignored.append((ref, "not refs/woolf/pr/<id>/votes/<validator name>"))
            continue
        ballot, why = parse_vote(git, sha, sub_id, metric)
        if ballot is not None and ballot.validator != name:
            ballot, why = None, f"a vote by {ballot.validator} on {name}'s ref"
        if ballot is None:
            ignored.append((ref, why))
            continue
        ballots.append(ballot)
        ref_of[ballot.commit] = ref
    good, bad = verify_voters(git, ballots, text)
    ignored += [(ref_of[c], why) for c, why in bad]
    return good, ignored


def make_vote(ledger, pr, main_commit: str, voter: str, fields: dict, subject: str) -> tuple[Ballot, str | None]:
    """This validator's vote as a local commit (on its previous vote, or the head), and the ref's old tip."""
    git = ledger.git
    old = git.rev_parse(vote_ref(pr.id, voter))
    message = format_message(subject, {**fields, "Woolf-Submission": pr.id, "Woolf-Main": main_commit,
                                       "Woolf-Voter": voter})
    commit = git.commit_tree(f"{pr.head}^{{tree}}", message, [old or pr.head])  # signed when keyed
    if len(message) > VOTE_MAX_BYTES // 2:  # a signature adds < 1 KiB; a vote near the limit is read back
        ballot, why = parse_vote(git, commit, pr.id, ledger.config.policy.metric)
    else:  # its own message, just written: read as every reader will, without reading it back
        ballot, why = ballot_of(message, commit, pr.id, ledger.config.policy.metric)
        _PARSED[(commit, pr.id, ledger.config.policy.metric)] = (ballot, why)  # the trust check reads it next
    if ballot is None:
        raise ForgeError(f"this validator's own vote does not parse: {why}")
    return ballot, old


def push_vote(ledger, pr, ballot: Ballot, old: str | None) -> None:
    """Push a vote made by make_vote, with a lease on the ref's old tip."""
    ref = vote_ref(pr.id, ballot.validator)
    ledger.git.push("origin", [(ballot.commit, ref)], leases={ref: old})
    ledger.git.run("update-ref", ref, ballot.commit)


def cast(ledger, pr, main_commit: str, voter: str, fields: dict, subject: str) -> Ballot:
    """Record this validator's vote: a commit on its previous vote (or the head), pushed with a lease."""
    ballot, old = make_vote(ledger, pr, main_commit, voter, fields, subject)
    push_vote(ledger, pr, ballot, old)
    return ballot
