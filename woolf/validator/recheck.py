"""The privileged apply job signs nothing it did not compute (issue 37, breach 6).

Usage (from woolf/validator/ci.py apply_record, with the job's ValidatorContext):
    verdict = own_rejection(ctx, pr, main, record, timer)    # a record's rejection, evaluated again here
    score = rescoring(ctx, adm, main, verdict, timer)        # candidate(before_merge=score): scores measured here

An evaluate artifact is a claim by a runner without write access. A record saying `accepted: false`
made the apply job close the PR with the record's reason; now this job evaluates the PR itself and
closes it only when its own evaluation rejects it, with its own reason and numbers; when its own
evaluation accepts, nothing is closed (the PR stays open; the sweeper validates it in full). The
`scores` of an accepted record are measured again (validator/score.py) before the merge: the
leaderboard reads only numbers this job computed.
"""

from __future__ import annotations

from woolf.errors import UsageError
from woolf.timing import Timer
from woolf.validator.score import judge_scores, score_delta
from woolf.validator.step import evaluate


def own_rejection(ctx, pr, main, record: dict, timer: Timer):
    """This job's own verdict on a PR the record says was rejected; UsageError when it disagrees."""
    verdict, _step = evaluate(ctx, pr, main, timer)  # the whole pipeline, as `woolf validate` runs it
    if verdict.accepted:
        raise UsageError(f"the record says rejected ({record['reason'][:200]!r}), but this job's own evaluation "
                         f"accepts the PR ({verdict.reason}): the artifact was altered or the evaluation "
                         "differs; nothing closed, the PR stays in the queue")
    return verdict


def rescoring(ctx, adm, main, verdict, timer: Timer):
    """A ``before_merge`` for MergeStep.candidate: the PR's scores measured in this job replace the record's."""
    verdict.scores, verdict.flags = None, []

    def score(current, delta, spent):
        sc = adm.screened
        verdict.content, verdict.delta_norm, verdict.clip, verdict.flags = sc.content, sc.norm, sc.clip, list(sc.flags)
        with timer("scoring"):
            verdict.scores = score_delta(ctx.ledger, ctx.device, adm, main, current, delta, ctx.ledger.workload(),
                                         spent)
        return judge_scores(ctx.ledger.config, verdict)

    return score
