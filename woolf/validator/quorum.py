"""The validator's side of a quorum: evaluate, vote, tally, and settle when k votes agree.

Usage (plain functions over the validator's ValidatorContext, woolf/validator/context.py; the
Validator calls vote_one when validators.quorum > 1):
    verdict = vote_one(ctx, sub_id)         # the verdict this validator wrote, or None (pending, or
                                            # settled by another member of the quorum)
    name = voter(ctx, main)                 # the name this validator votes under
    verdict, step, sha = judge(ctx, pr, main, timer)          # what its vote would say
    vote, old = make_ballot(ctx, pr, main, verdict, sha, timer)    # that vote made and signed, not pushed

One PR, one pass: fetch; if this validator has no vote on the PR against main's
current head, evaluate it (the same checks, merge rule and gate as a single
validator) and push a signed vote; tally the votes cast against main's head
(woolf/protocol/tally.py); when k agree, a validator of that quorum writes the
verdict naming the votes (`Woolf-Votes`): a merge by the same atomic push as
always, or a rejection. A vote that completes a quorum is pushed in that same
atomic push (one push, one run of the hub's hook, instead of two). Otherwise the PR stays open; after
`validators.vote_timeout` seconds from its first vote (the vote commit's own
timestamp, which the hub bounds by its clock when the vote lands) it is settled as `expired`, once
votes of at least k validators failed to agree (fewer could forge it; the hub refuses that).

A delta that storage cannot serve is no vote while the PR is younger than
`validators.vote_timeout` (since this validator received it), then a reject
vote naming that, so such a PR is settled (rejected by quorum, or expired)
instead of staying open forever. Any failure of the ledger's own storage or
forge is no vote: the PR stays open and is retried. Any other failure while
judging a PR is a reject vote naming it.

CI (woolf/validator/ci.py): `vote_one(ctx, sub_id, fixed=Fixed(main, verdict, step, sha, head))` votes
a verdict judged elsewhere (a re-checked verdict record) and never evaluates; if main
moved it returns a "requeued" verdict, and a vote that does not complete a quorum
returns a "voted" verdict (after one more look, in case another runner voted at once).

What a validator remembers between PRs and passes (its judgments, the votes it found invalid,
its voter name) is its ValidatorState (woolf/validator/state.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from woolf.errors import ForgeError, IntegrityError, RaceLostError, StorageError, UsageError
from woolf.git.keys import public_of
from woolf.protocol import layout
from woolf.protocol.signers import Signers, signers_text
from woolf.protocol.tally import Ballot, Outcome, tally
from woolf.protocol.votes import make_vote, push_vote, read_votes, vote_ref
from woolf.storage.writer import sha256_of
from woolf.timing import Timer
from woolf.validator.context import ValidatorContext
from woolf.validator.intake import Deferred
from woolf.validator.publish import merge
from woolf.validator.state import Fixed, Judged, Round, Unpushed
from woolf.validator.step import evaluate, fresh, verdict_trailers
from woolf.validator.verdict import Verdict, failpoint

log = logging.getLogger("woolf.validator")
RETRY_UNAVAILABLE = 10.0  # seconds before a PR whose delta storage could not serve is tried again
MAX_ROUNDS = 8
KEEP_STEPS = 2  # candidates kept in memory for PRs still waiting for votes (the others are made again)


def candidate_sha256(step) -> str:
    """sha256 of the file the merge will upload, hashed from the tensors' memory (no serialised copy;
    woolf/storage/writer.py lays out the same bytes as safetensors, which save_atomic writes)."""
    return sha256_of(step.candidate)


def voter(ctx: ValidatorContext, main) -> str:
    """The name this validator votes under: its key's name in allowed_signers (signed ledgers)."""
    if ctx.state.voter_name:
        return ctx.state.voter_name

    text = signers_text(ctx.ledger.git, main.commit)
    if text is None:
        name = ctx.name
    else:
        key = public_of(ctx.ledger.git.sign_key).split()[1]
        name = next((s.name for s in Signers.parse(text.decode(errors="replace")).entries
                     if s.key == key and "validator" in s.roles), None)
    if not name or not layout.CONTRIBUTOR.match(name):
        raise UsageError(f"cannot vote as {name!r}: a voter is one plain name",
                         hint="pass --name NAME (lower-case letters, digits, . _ -)")
    ctx.state.voter_name = name
    return name


def judge(ctx: ValidatorContext, pr, main, timer: Timer) -> tuple[Verdict | None, object, str | None]:
    """(verdict, merge step, candidate sha256); verdict None when the delta was unavailable."""
    try:
        verdict, step = evaluate(ctx, pr, main, timer)
    except (StorageError, ForgeError, IntegrityError, Deferred):
        raise  # the ledger's own storage or forge: this pass stops, nothing is voted; or an audit waits
    except Exception as exc:  # noqa: BLE001 - one hostile PR must never stop the queue
        verdict, step = Verdict(pr.id, False, "rejected", f"the validator could not process this PR "
                                f"({type(exc).__name__})", pr.contributor, pr.base_version), None
    if not verdict.accepted and verdict.reason.startswith("delta object unavailable"):
        age, limit = _unavailable_for(ctx, pr), ctx.ledger.config.validators.vote_timeout
        if age < limit:
            return None, None, None  # storage could not serve it now: retried, not rejected
        verdict.reason = (f"{verdict.reason} (for {age:.0f} s since this validator received the PR, "
                          f"over validators.vote_timeout {limit:g} s)")  # a reject vote: it gets settled
    with timer("vote"):  # the candidate's hash, which the vote carries
        sha = candidate_sha256(step) if step is not None else None
    return verdict, step, sha


def _unavailable_for(ctx: ValidatorContext, pr) -> float:
    """Seconds since this validator received ``pr`` (its first sight of the head ref, kept in the
    reflog across restarts; else the first time it found the delta unavailable)."""
    first = ctx.state.unavailable_since.setdefault(pr.id, time.time())
    if isinstance(pr.received, (int, float)):
        first = min(first, float(pr.received))
    return time.time() - first


def make_ballot(ctx: ValidatorContext, pr, main, verdict: Verdict, sha: str | None,
                timer: Timer) -> tuple[Ballot, str | None]:
    """This validator's vote on ``pr`` against ``main`` saying ``verdict``, made and signed but not pushed,
    and the tip of its vote ref the push replaces (protocol/votes.py push_vote)."""
    fields = {"Woolf-Vote": "accept" if verdict.accepted else "reject",
              "Woolf-Candidate-Sha256": sha if verdict.accepted else None,
              "Woolf-Reason": " ".join(verdict.reason.split())[:1000],
              **verdict_trailers(ctx, verdict, timer)}
    fields.pop("Woolf-Validator", None)
    with timer("vote"):
        return make_vote(ctx.ledger, pr, main.commit, voter(ctx, main), fields,
                         f"woolf: vote {fields['Woolf-Vote']} {pr.id}")


def vote_one(ctx: ValidatorContext, sub_id: str, fixed: Fixed | None = None) -> Verdict | None:
    """_vote_one, where a failure on one PR (not the ledger's own) is logged and retried later,
    never the end of the pass: the PRs behind it still get their votes. A vote from a CI record
    (``fixed``) is one PR's job: its failure is the job's."""
    if fixed is not None:
        return _vote_one(ctx, sub_id, fixed)
    try:
        return _vote_one(ctx, sub_id)
    except Deferred as exc:  # waiting for what an audit asked for (validator/audit_wait.py): no vote yet
        log.info("%s", exc.message)
        return None
    except (StorageError, ForgeError, IntegrityError):
        raise  # the ledger's own storage or forge: this pass stops, as in validate_one
    except Exception as exc:  # noqa: BLE001 - one hostile PR must never stop the queue
        log.warning("%s: voting failed with %s: %s; retried later", sub_id, type(exc).__name__, str(exc)[:400])
        ctx.state.retry_later(sub_id, RETRY_UNAVAILABLE * 6)
        return None


def _vote_one(ctx: ValidatorContext, sub_id: str, fixed: Fixed | None = None) -> Verdict | None:
    """Rounds of read ballots → judge → vote → settle (or wait, or expire) on one PR, at most
    MAX_ROUNDS: a round whose push loses a race starts again from a fresh read."""
    looked_again = False
    for _ in range(MAX_ROUNDS):
        r = _read_ballots(ctx, sub_id, fixed)
        if r is None:
            return None  # no longer open (settled by another member, or withdrawn)
        moved = fixed.moved(r.pr, r.main) if fixed is not None else None
        if moved:
            return requeued(r.pr, moved)
        r.judged = fixed if fixed is not None else _judgment(ctx, r)
        if r.judged is None:
            return None  # its delta is unavailable in storage now: no vote, retried
        out = _cast(ctx, r)
        if out is None:
            return None  # the candidate made again is not the one the quorum agreed on
        settles = _settles(ctx, r, out)
        if not _send_vote(ctx, r, settles):
            continue  # the vote lost a race: read again
        if out.state == "pending":
            if fixed is not None and r.pushed and not looked_again:
                looked_again = True  # another runner may have voted at the same moment: look once more
                continue
            return _wait(ctx, r, fixed is not None)
        if not settles:  # a member of the quorum that holds the candidate writes the verdict
            return None if fixed is None else _voted(r.pr, r.judged.verdict, r.mine, r.q.quorum)
        verdict = _settle(ctx, r, out)
        if verdict is not None:
            return verdict
        # main moved or another member settled it: read again
    return None


def _read_ballots(ctx: ValidatorContext, sub_id: str, fixed: Fixed | None) -> Round | None:
    """The PR and main as they are now, and the votes cast on the PR (each ignored one logged once);
    None when the PR is no longer open."""
    timer = Timer(fixed.verdict.timings if fixed else {})  # a record's vote carries its evaluation's timings
    with timer("fetch"):
        pr, main = fresh(ctx, sub_id)
        if pr.state != "open":
            ctx.state.forget(sub_id)
            return None
    q, me = ctx.ledger.config.validators, voter(ctx, main)
    with timer("vote"):  # reading and verifying the others' votes
        ballots, ignored = read_votes(ctx.ledger.git, pr.id, signers_text(ctx.ledger.git, main.commit),
                                      ctx.ledger.config.policy.metric)
    for ref, why in ignored:
        if f"{ref}{why}" not in ctx.state.ignored_votes:
            ctx.state.ignored_votes.add(f"{ref}{why}")
            log.warning("%s: ignored vote %s: %s", sub_id, ref, why)
    current = [b for b in ballots if b.main == main.commit]
    mine = next((b for b in current if b.validator == me), None)
    return Round(pr, main, q, me, timer, ballots, current, mine)


def _judgment(ctx: ValidatorContext, r: Round) -> Judged | None:
    """This validator's judgment of the PR against main's head: the one it made before, else a new
    evaluation (remembered); None when its delta is unavailable in storage now (retried later)."""
    judged = ctx.state.judged.get(r.pr.id)
    if judged is not None and judged.main == r.main.commit:
        return judged
    verdict, step, sha = (ctx.judge or judge)(ctx, r.pr, r.main, r.timer)
    if verdict is None:
        ctx.state.retry_later(r.pr.id, RETRY_UNAVAILABLE)
        log.warning("%s: its delta is unavailable in storage now; no vote, retried", r.pr.id)
        return None
    return ctx.state.remember(r.pr.id, Judged(r.main.commit, verdict, step, sha), KEEP_STEPS)


def _cast(ctx: ValidatorContext, r: Round) -> Outcome | None:
    """Make this validator's vote (not pushed yet) unless the one it has against main's head says the
    same, and tally the votes. None when the quorum, this validator in it, merges a candidate it
    dropped from memory, and making that again gives another one."""
    verdict, sha = r.judged.verdict, r.judged.sha
    want = "accept" if verdict.accepted else "reject"
    if r.mine is None or r.mine.decision != want or r.mine.candidate != (sha if verdict.accepted else None):
        ballot, old = make_ballot(ctx, r.pr, r.main, verdict, sha, r.timer)
        r.mine, r.unpushed = ballot, Unpushed(ballot, old)
        r.current = [b for b in r.current if b.validator != r.me] + [ballot]
    out = tally(r.current, r.q.quorum, r.q.epsilon)
    if out.state == "merged" and r.judged.step is None and verdict.accepted and r.unpushed is None \
            and r.me in {b.validator for b in out.votes}:
        # its candidate was dropped: make it again
        verdict, step, sha = (ctx.judge or judge)(ctx, r.pr, r.main, r.timer)
        if verdict is None or sha != out.candidate:
            return None
        r.judged = Judged(r.main.commit, verdict, step, sha)  # for this round only, as the vote stands
    return out


def _settles(ctx: ValidatorContext, r: Round, out: Outcome) -> bool:
    """Whether this validator writes the verdict: it is in the agreeing quorum and, for a merge,
    holds the candidate."""
    return (out.state != "pending" and r.me in {b.validator for b in out.votes}
            and (out.state == "rejected" or r.judged.step is not None))


def _send_vote(ctx: ValidatorContext, r: Round, settles: bool) -> bool:
    """Push this round's new vote on its own, unless this validator settles the PR on a forge whose
    verdict push can carry it (votes_ride_verdicts); False when the push lost a race."""
    if r.unpushed is None or (settles and ctx.forge.votes_ride_verdicts):
        return True
    try:
        with r.timer("vote"):
            push_vote(ctx.ledger, r.pr, r.unpushed.ballot, r.unpushed.old)
    except RaceLostError:
        return False
    r.unpushed, r.pushed = None, True

    failpoint("after-vote")
    ctx.forge.vote_status(r.pr, r.me, r.mine.decision, r.judged.verdict.reason)  # e.g. GitHub: a status
    return True


def _wait(ctx: ValidatorContext, r: Round, from_record: bool) -> Verdict | None:
    """No quorum yet: the PR expires once its first vote is older than vote_timeout; else it waits
    (None; for a CI record, the verdict "voted")."""
    ballots = [b for b in r.ballots if b.validator != r.me] + ([r.mine] if r.mine else [])  # its own, as pushed
    expired = _maybe_expire(ctx, r.pr, ballots, r.q, r.judged.verdict, r.timer)
    if expired is not None or not from_record:
        return expired
    return _voted(r.pr, r.judged.verdict, r.mine, r.q.quorum)


def _settle(ctx: ValidatorContext, r: Round, out: Outcome) -> Verdict | None:
    """Write the verdict the quorum agreed on, naming its votes (this validator's unpushed vote rides
    in the same push); None when that push lost a race."""
    verdict = r.judged.verdict
    votes = [b.commit for b in out.votes]
    also = [(r.unpushed.ballot.commit, vote_ref(r.pr.id, r.me), r.unpushed.old)] if r.unpushed else None
    try:
        if out.state == "rejected":
            with r.timer("push"):
                ctx.forge.reject(r.pr, verdict.reason, {**verdict_trailers(ctx, verdict, r.timer), "Woolf-Votes": votes,
                                                         "Woolf-Main": r.main.commit}, also=also)
        else:
            merge(ctx, r.pr, r.main, verdict, r.judged.step, r.timer, extra={"Woolf-Votes": votes}, also=also)
    except RaceLostError:
        return None
    verdict.timings = dict(r.timer)
    ctx.state.forget(r.pr.id)
    return verdict


def _maybe_expire(ctx: ValidatorContext, pr, ballots, q, verdict: Verdict, timer: Timer) -> Verdict | None:
    """The verdict "expired" once the PR's first vote is older than validators.vote_timeout; None
    before that, or when another validator settled it first."""
    if len({b.validator for b in ballots}) < q.quorum or tally(ballots, q.quorum, q.epsilon).state != "pending":
        return None  # fewer validators than a quorum never expire a PR (the hub refuses it): it waits
    first = min(int(t) for t in ctx.ledger.git.out(
        "log", "--no-walk=unsorted", "--format=%ct", *(b.commit for b in ballots)).split())
    if time.time() - first < q.vote_timeout:
        return None
    reason = (f"no quorum of {q.quorum} agreeing votes within {q.vote_timeout:g} s of the first vote "
              f"({len(ballots)} vote(s) cast)")
    try:
        ctx.forge.expire(pr, reason, {"Woolf-Validator": ctx.name, "Woolf-Votes": [b.commit for b in ballots]})
    except RaceLostError:
        return None
    ctx.state.forget(pr.id)

    return Verdict(pr.id, False, "expired", reason, verdict.contributor, verdict.base_version)


def requeued(pr, why: str) -> Verdict:
    return Verdict(pr.id, False, "requeued", f"{why}; it stays open and is validated again "
                   "(next push to the PR, or the scheduled sweeper)", pr.contributor, pr.base_version)


def _voted(pr, verdict: Verdict, mine, k: int) -> Verdict:
    """This validator's vote is cast and counted; the PR waits for the quorum's other votes."""
    return replace(verdict, accepted=False, state="voted",
                   reason=f"voted {mine.decision} ({verdict.reason}); waiting for {k} agreeing votes")
