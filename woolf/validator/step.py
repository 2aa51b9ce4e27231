"""One PR through the validator: the stages of its evaluation run in order, and its verdict.

Usage (plain functions over the validator's ValidatorContext, woolf/validator/context.py):
    pr, main = fresh(ctx, sub_id)                            # as the forge and origin have them now
    verdict, step = evaluate(ctx, pr, main, timer)           # Verdict, and the merge Step if accepted
    current, step = candidate(ctx, adm, main, att, timer)    # from load to the merge alone
    verdict_trailers(ctx, verdict, timer)                    # what every verdict of this validator carries

The stages, their order and what each fills of the candidate record: validator/stages.py. The
upload and push of an accepted PR: publish.py.
"""

from __future__ import annotations

from woolf.core.merge_rules import Step
from woolf.errors import Rejected
from woolf.ledger.benchmark import published
from woolf.ledger.trust import require_validator
from woolf.timing import Timer
from woolf.validator import stages
from woolf.validator.ahead import cancel_ahead
from woolf.validator.candidate import Candidate, verdict_of
from woolf.validator.context import ValidatorContext
from woolf.validator.score import verdict_fields
from woolf.validator.verdict import Verdict

MERGED = (stages.load, stages.norm_guard, stages.screen, stages.merge)  # an admitted PR's candidate alone


def fresh(ctx: ValidatorContext, sub_id: str, fetch: bool = True):
    """(PR, main's head) as the forge and origin have them now (``fetch``: False when this pass
    just fetched); the config re-read from main."""
    if fetch:
        ctx.ledger.fetch()
    ctx.ledger.reread_config()
    pr, main = ctx.forge.refresh(sub_id), ctx.ledger.head()
    require_validator(ctx.ledger, main)  # main's head and config signed; this clone signs as a validator
    return pr, main


def evaluate(ctx: ValidatorContext, pr, main, timer: Timer, write_ahead: bool = False) -> tuple[Verdict, Step | None]:
    """The verdict on ``pr`` against ``main`` (every stage of validator/stages.py, in order), and the
    merge Step when it is accepted.

    The delta's storage hashes (validator/delta_load.py) run beside the candidate's evaluation, and
    are settled here before any verdict: wrong ones turn it into the rejection they always gave.
    ``write_ahead``: the caller publishes an accepted step with publish.merge, so the candidate is
    written and hashed in a helper thread from its merge on (validator/ahead.py)."""
    cand = Candidate(pr, main, timer, write_ahead)
    try:
        cand.accepted = stages.run(ctx, cand, stages.STAGES) is None
    except Rejected as exc:
        cand.reason = exc.message
    finally:
        try:
            with timer("verify"):  # waiting for the delta's storage hashes (validator/delta_load.py)
                stages.settle_delta(ctx, cand.unsettled)
        except Rejected as exc:
            cand.problem = exc.message  # the verdict the hash checks gave before they ran beside the rest
        if not cand.accepted or cand.problem is not None:
            cancel_ahead(ctx)  # nothing is published: a candidate written ahead is dropped
    verdict = verdict_of(cand)
    return verdict, cand.step if verdict.accepted else None


def candidate(ctx: ValidatorContext, adm, main, att: float, timer: Timer, in_place: bool = False):
    """(current weights, merge Step) of the admitted ``adm`` at attenuation ``att``: the stages from load
    to the merge (no scoring), its delta's storage hashes settled before this returns; raises Rejected.
    ``in_place``: main's metrics are measured first (``state.eval_cache``) and the returned weights are
    the candidate's."""
    cand = Candidate(None, main, timer, in_place=in_place, adm=adm, attenuation=att)
    stages.run_settled(ctx, cand, MERGED)
    return cand.current, cand.step


def verdict_trailers(ctx: ValidatorContext, v: Verdict, timer: Timer) -> dict:
    """The trailers every verdict of this validator carries (a merge, a rejection, a vote adds its own)."""
    return {
        "Woolf-Contributor": v.contributor, "Woolf-Base-Version": v.base_version,
        "Woolf-Staleness": v.staleness, "Woolf-Attenuation": v.attenuation,
        "Woolf-Metrics-Before": published(ctx.ledger.config, v.metrics.get("before"), v.accepted),
        "Woolf-Metrics-After": published(ctx.ledger.config, v.metrics.get("after"), v.accepted),
        "Woolf-Validator": ctx.name, "Woolf-Timings": dict(timer),
        "Woolf-Device": v.device,  # None (omitted) when nothing was evaluated
        **verdict_fields(v, ctx.ledger.config),
        "Woolf-Retrain": v.retrain,  # whether this validator re-trained the PR, and how it compared
    }
