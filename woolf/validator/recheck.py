"""The privileged apply job signs nothing it did not compute.

Usage (from woolf/validator/ci.py apply_record, with the job's ValidatorContext):
    verdict = own_rejection(ctx, pr, main, record, verdict, timer)   # a record's rejection, evaluated here
    current, step = rescored_candidate(ctx, cand)                    # scores measured here: cand.scores

An evaluate artifact is a claim by a runner without write access. A record saying `accepted: false`
made the apply job close the PR with the record's reason; now this job evaluates the PR itself and
closes it only when its own evaluation rejects it, with its own reason and numbers; when its own
evaluation accepts, nothing is closed (the PR stays open; the sweeper validates it in full). Under a
quorum (k > 1) a record stays its validator's vote, as before: one reject vote closes nothing. The
`scores` of an accepted record are measured again (validator/score.py) before the merge: the
leaderboard reads only numbers this job computed.
"""

from __future__ import annotations

from woolf.errors import Rejected, UsageError
from woolf.timing import Timer
from woolf.validator import stages
from woolf.validator.candidate import Candidate
from woolf.validator.step import evaluate

# the stages from load to the merge, scoring included (no re-training: the record's PR was judged whole)
RESCORED = (stages.load, stages.norm_guard, stages.screen, stages.score, stages.merge)


def own_rejection(ctx, pr, main, record: dict, verdict, timer: Timer):
    """``verdict`` unless it is the record's rejection (not one this job's cheap checks made): then this
    job's own verdict on the PR; UsageError when its own evaluation accepts what the record rejects."""
    if record["accepted"] or verdict.reason != record["reason"]:
        return verdict
    if ctx.ledger.config.validators.quorum > 1:  # a record is then its validator's vote, one of k needed to
        return verdict                             # close the PR: one runner's forged reject closes nothing
    own, _step = evaluate(ctx, pr, main, timer)  # the whole pipeline, as `woolf validate` runs it
    if own.accepted:
        raise UsageError(f"the record says rejected ({record['reason'][:200]!r}), but this job's own evaluation "
                         f"accepts the PR ({own.reason}): the artifact was altered or the evaluation "
                         "differs; nothing closed, the PR stays in the queue")
    return own


def rescored_candidate(ctx, cand: Candidate):
    """(current weights, merge Step) of the admitted ``cand`` (its ``adm`` and ``attenuation`` set), with
    the PR's scores measured in this job (candidate.found(cand) replaces the record's), main's metrics
    first; raises Rejected when this job's own scores refuse the PR (validator/score.py judge_scores)."""
    refused = stages.run_settled(ctx, cand, RESCORED)
    if refused:
        raise Rejected(refused)
    return cand.current, cand.step
