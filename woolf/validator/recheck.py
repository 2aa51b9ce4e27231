"""The privileged apply job signs nothing it did not compute.

Usage (from woolf/validator/ci.py apply_record, with the job's ValidatorContext):
    verdict = own_rejection(ctx, pr, main, record, verdict, timer)   # a record's rejection, evaluated here
    current, step = rescored_candidate(ctx, adm, main, att, verdict, timer)   # scores measured here

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
from woolf.validator.score import judge_scores, score_delta
from woolf.validator.step import candidate, evaluate


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


def rescored_candidate(ctx, adm, main, att: float, verdict, timer: Timer):
    """step.candidate, with the PR's scores measured in this job (they replace the record's); raises
    Rejected when this job's own scores refuse the PR (validator/score.py judge_scores)."""
    verdict.scores, verdict.flags = None, []

    def score(current, delta, spent):
        sc = adm.screened
        verdict.content, verdict.delta_norm, verdict.clip, verdict.flags = sc.content, sc.norm, sc.clip, list(sc.flags)
        with timer("scoring"):
            verdict.scores = score_delta(ctx.ledger, ctx.device, adm, main, current, delta, ctx.ledger.workload(),
                                         spent)
        return judge_scores(ctx.ledger.config, verdict)

    current, step = candidate(ctx, adm, main, att, timer, before_merge=score, in_place=True)
    if step is None:
        raise Rejected(verdict.reason or "its contribution scores, measured again, refuse it")
    return current, step
