"""One PR through the pipeline: checks, the merge rule and the gate (its upload and push: publish.py).

Usage (plain functions over the validator's ValidatorContext, woolf/validator/context.py):
    pr, main = fresh(ctx, sub_id)                            # as the forge and origin have them now
    verdict, step = evaluate(ctx, pr, main, timer)           # Verdict, and the merge Step if accepted
    current, step = candidate(ctx, adm, main, att, timer)    # the checks and the merge alone (ci.py)
    gate_reference(ctx, before); verdict_trailers(ctx, verdict, timer); merged_deltas(ctx, main)
"""

from __future__ import annotations

import logging
import math

from woolf.core.merge_rules import Rule, Step
from woolf.core.policy import decide
from woolf.core.scores import norm
from woolf.core.staleness import attenuation
from woolf.errors import (
    InvalidWeightsError,
    Rejected,
)
from woolf.ledger.benchmark import gate_benchmark, published, published_reason
from woolf.ledger.transition import parent_state, streamable, transition
from woolf.ledger.trust import require_validator
from woolf.protocol.rules.submitter import check_submitter
from woolf.storage.lazy import LazyTensors
from woolf.storage.weights import check_finite, spec_of
from woolf.timing import Timer
from woolf.validator.admission import Admitted, admit
from woolf.validator.ahead import cancel_ahead, start_ahead
from woolf.validator.context import ValidatorContext
from woolf.validator.copyindex import copy_index
from woolf.validator.delta_load import load_delta, settle
from woolf.validator.resident import give_back, take_main
from woolf.validator.retrain import recipe_reason, retrain_check, retrain_record
from woolf.validator.score import judge, judge_scores, score_delta, verdict_fields
from woolf.validator.screen import check_queue, screen_delta
from woolf.validator.state import MergedDeltas
from woolf.validator.verdict import Verdict
from woolf.workloads.base import describe_device

log = logging.getLogger("woolf.validator")


def fresh(ctx: ValidatorContext, sub_id: str, fetch: bool = True):
    """(PR, main's head) as the forge and origin have them now (``fetch``: False when this pass
    just fetched); the config re-read from main."""
    if fetch:
        ctx.ledger.fetch()
    ctx.ledger.reread_config()
    pr, main = ctx.forge.refresh(sub_id), ctx.ledger.head()
    require_validator(ctx.ledger, main)  # main's head and config signed; this clone signs as a validator
    return pr, main


def merged_deltas(ctx: ValidatorContext, main) -> set[str]:
    """sha256 of every merged delta on ``main`` (admission's replay check), read once per main head."""
    cached = ctx.state.merged
    if cached and cached.main == main.commit:
        return cached.sha256s
    found = {v.delta_sha256 for v in ctx.ledger.log() if v.delta_sha256}
    ctx.state.merged = MergedDeltas(main.commit, found)
    return found


def candidate(ctx: ValidatorContext, adm: Admitted, main, att: float, timer: Timer, before_merge=None,
              in_place: bool = False, unsettled: list | None = None):
    """(current weights, merge Step) after the data checks; raises Rejected.

    The delta's storage hashes (md5, sha256) start once its merge is made, to run beside the
    candidate's evaluation (validator/delta_load.py): its checks and merge ran on bytes not yet known
    to be the declared ones, and nothing of them takes effect before the hashes are settled: here,
    before this returns, or, given ``unsettled``, by the caller before its verdict (``evaluate``),
    the delta appended there. A rejection meanwhile waits for them: wrong hashes are the reason.

    ``before_merge(current, delta, spent)``: runs after the checks and before the merge (scoring reads
    the delta there, and may spend current's memory: it says so in ``spent``; for a stale PR current
    is emptied before it, since scoring reads the base version instead); a reason it returns vetoes
    the merge: (current, None). The merge then writes the candidate into the delta's memory (the
    delta is not needed after it).

    ``in_place``: the caller needs main's benchmark metrics only from ``state.eval_cache``, so they
    are measured here first, and the merge may then write the candidate into current's memory
    tensor by tensor (ledger/transition.py): the returned weights are then the candidate's.

    A parent version whose outer state is missing or does not fit raises
    IntegrityError/StorageError: nothing is merged on top of it (not the PR's fault).
    """
    with timer("load"):
        current, model_norm = take_main(ctx, main)
    delta = None
    try:  # a rejection by the checks leaves main's weights untouched: they stay resident
        with timer("load"):
            current_spec = spec_of(current)
            state = parent_state(ctx.ledger, main, current_spec, f"outer state of version {main.version}")
            delta = load_delta(ctx, adm, current_spec)
        with timer("checks"):
            norms = _check_norm(ctx, adm, current, delta, model_norm)
            model_norm = norms[1]
            adm.screened = screen_delta(ctx.ledger, ctx.forge, ctx.state, adm, main, current, delta,
                                        norms)  # no-op, norm guard, replay, copies
    except Rejected:
        give_back(ctx, main, current, model_norm)
        with timer("verify"):
            _settle(ctx, delta)  # wrong storage hashes are the reason, whatever the checks found
        raise
    try:
        current, step = _merged(ctx, adm, main, att, timer, current, delta, state, before_merge, in_place)
        if getattr(delta, "pending", None) is not None:  # its storage hashes from now on, beside the evaluation
            delta.pending.start()
    except BaseException:
        with timer("verify"):
            _settle(ctx, delta)  # raises the hashes' Rejected instead, when they are wrong
        raise
    if unsettled is None:
        with timer("verify"):
            _settle(ctx, delta)
    else:
        unsettled.append(delta)
    return current, step


def _settle(ctx: ValidatorContext, delta) -> None:
    """delta_load.settle; when the bytes were not the declared ones, what the copy index made of them goes."""
    try:
        settle(delta)
    except Rejected:
        key = getattr(delta, "declared_sha256", None)
        if key:
            copy_index(ctx.state).forget(key)
        raise


def _merged(ctx: ValidatorContext, adm: Admitted, main, att: float, timer: Timer, current, delta, state,
            before_merge, in_place: bool):
    """candidate's scoring hook and merge, once the checks passed."""
    cfg = ctx.ledger.config
    spent: list = []  # scoring wrote into current's memory: main's weights are read again
    if before_merge is not None:
        if adm.base.commit != main.commit and cfg.scoring.enabled:  # scoring reads the stale PR's base
            current.clear()  # version: main's weights are dropped meanwhile and read again (never two models)
            spent.append("current")
        if before_merge(current, adm.screened.delta, spent):
            return current, None
    if spent:
        with timer("load"):
            current.clear()  # dropped before the new copy is read: never three models at once
            current.update(ctx.ledger.load_weights(main))
    rule = Rule.from_config(cfg.merge)
    in_place = in_place and streamable(rule, current, delta)
    if in_place:  # main's metrics first: current's memory then receives the candidate
        evaluate_before(ctx, main, current, timer)
    with timer("merge"):  # the screen clipped the delta already (Woolf-Delta-Clip)
        return current, transition(rule, current, state, delta, att, in_place=in_place)


def evaluate_before(ctx: ValidatorContext, main, current, timer: Timer) -> dict:
    """main's benchmark metrics, measured once per main commit (``state.eval_cache``)."""
    before = ctx.state.eval_cache.get(main.commit)
    if before is None:
        wl, bench = ctx.ledger.workload(), gate_benchmark(ctx.ledger)
        with timer("evaluation"):
            before = ctx.state.eval_cache[main.commit] = wl.evaluate(current, bench, ctx.device)
    return before


def gate_reference(ctx: ValidatorContext, before: dict) -> dict:
    """What the candidate is compared with: main's metrics, or the best recent version's."""
    policy = ctx.ledger.config.policy
    if policy.gate != "best" or policy.metric not in before:
        return before
    values = [float(before[policy.metric])]
    for v in ctx.ledger.log(limit=policy.window):
        m = (v.metrics or {}).get(policy.metric)
        if isinstance(m, (int, float)) and math.isfinite(m):
            values.append(float(m))
    best = min(values) if policy.direction == "minimize" else max(values)
    return {**before, policy.metric: best}


def evaluate(ctx: ValidatorContext, pr, main, timer: Timer, write_ahead: bool = False) -> tuple[Verdict, Step | None]:
    """The verdict on ``pr`` against ``main``, and the merge Step when it is accepted.

    The delta's storage hashes (validator/delta_load.py) run beside the candidate's evaluation, and
    are settled here before any verdict: wrong ones turn it into the rejection they always gave.
    ``write_ahead``: the caller publishes an accepted step with publish.merge, so the candidate is
    written and hashed in a helper thread from its merge on (validator/ahead.py)."""
    verdict = Verdict(pr.id, False, "rejected", "", pr.contributor, pr.base_version)
    unsettled: list = []
    step, problem = None, None
    try:
        check_submitter(ctx.ledger, pr, main)  # id, submission.json and signature name one contributor
        verdict, step = _evaluate(ctx, pr, main, verdict, timer, unsettled, write_ahead)
    except Rejected as exc:
        verdict.reason = exc.message
    finally:
        try:
            with timer("verify"):  # waiting for the delta's storage hashes (validator/delta_load.py)
                for delta in unsettled:
                    _settle(ctx, delta)
        except Rejected as exc:
            problem = exc.message
        if step is None or problem is not None:
            cancel_ahead(ctx)  # nothing is published: a candidate written ahead is dropped
    if problem is not None:  # the verdict the hash checks gave before they ran beside the rest
        return Verdict(pr.id, False, "rejected", problem, verdict.contributor, verdict.base_version,
                       staleness=verdict.staleness, attenuation=verdict.attenuation), None
    return verdict, step


def _evaluate(ctx: ValidatorContext, pr, main, verdict: Verdict, timer: Timer, unsettled: list,
              write_ahead: bool) -> tuple[Verdict, Step | None]:
    cfg = ctx.ledger.config
    with timer("checks"):
        adm: Admitted = admit(ctx.ledger, pr, main, merged_deltas(ctx, main))
        check_queue(ctx.ledger, ctx.forge, ctx.state, pr)  # over its contributor's open-PR limit: rejected unread
        reason = recipe_reason(ctx.ledger, adm, ctx)  # the recipe's and proof's rules, before any weights
        if reason:  # are read; a drawn PR waits here for the states its audit asked for (raises Deferred)
            verdict.retrain = retrain_record(adm)
            raise Rejected(reason)
    verdict.base_version, verdict.staleness = adm.base.version, adm.staleness
    verdict.contributor = pr.contributor  # the forge's claim: None when a keyed name is not signed by its key
    verdict.attenuation = attenuation(cfg.merge.staleness, adm.staleness)
    wl = ctx.ledger.workload()

    def score(current, delta, spent):  # before the merge, which reuses the delta's memory
        sc = adm.screened
        verdict.content, verdict.delta_norm, verdict.clip, verdict.flags = sc.content, sc.norm, sc.clip, sc.flags
        with timer("scoring"):  # assigned vs random shard; a delta that learned nothing is refused here
            verdict.scores = score_delta(ctx.ledger, ctx.device, adm, main, current, delta, wl, spent)
        verdict.reason = judge_scores(ctx.ledger.config, verdict) or ""
        if not verdict.reason:  # a drawn PR re-trained from its recipe (validator/retrain.py)
            with timer("retrain"):
                verdict.reason = retrain_check(ctx.ledger, ctx.device, adm, delta, verdict, pr.head, ctx) or ""
        return verdict.reason

    # in_place: main's metrics are measured before the merge, which may then write the candidate
    # into current's memory (one model in memory, not two)
    current, step = candidate(ctx, adm, main, verdict.attenuation, timer, before_merge=score, in_place=True,
                              unsettled=unsettled)
    if step is None:  # vetoed by the scores (verdict.reason says why)
        return verdict, None
    if write_ahead:  # written and hashed while it is evaluated; published only if accepted
        start_ahead(ctx, pr.id, step.candidate)
    bench = gate_benchmark(ctx.ledger)  # the hidden benchmark when the config pins one (ledger/benchmark.py)
    before = evaluate_before(ctx, main, current, timer)  # measured already when the merge was in place
    with timer("evaluation"):
        probe = wl.evaluate(step.probe, bench, ctx.device)
    verdict.device = describe_device(ctx.device)
    # "after" is the loss of the weights that become the version; a FedBuff merge that only
    # buffers leaves them unchanged and is judged by its delta on its own ("probe")
    verdict.metrics = {"before": before, "after": probe if step.applied else before}
    if not step.applied:
        verdict.metrics["probe"] = probe
    reference = gate_reference(ctx, before)
    decision = decide(cfg.policy, reference, probe)
    verdict.reason = decision.reason if reference is before else f"{decision.reason} [best recent version]"
    if not decision.accepted:  # a hidden benchmark's numbers to 0.01 in a rejection, like its metrics
        verdict.reason = published_reason(cfg, verdict.reason)
        return verdict, None
    veto = judge(ctx.ledger, verdict, before, probe)  # changes nothing, drawdown
    if veto:
        verdict.reason = published_reason(cfg, veto)
        return verdict, None
    verdict.accepted, verdict.state = True, "merged"
    return verdict, step


def _check_norm(ctx: ValidatorContext, adm: Admitted, current, delta,
                model_norm: float | None = None) -> tuple[float, float]:
    """(norm of the delta, norm of the model), float32-accumulated (scores.norm: plenty for a ratio,
    nothing big allocated); scoring's screen reuses them instead of two more passes. ``model_norm``:
    the model's, measured already (a resident main's). A delta read from its file is sketched for the
    copy index in the same read (one read of its tensors for both)."""
    limit = ctx.ledger.config.limits.max_delta_norm_ratio
    w = norm(current) if model_norm is None else model_norm
    if isinstance(delta, LazyTensors):
        n = copy_index(ctx.state).norm_and_sketch(adm.meta["delta"]["sha256"], delta)
    else:
        n = norm(delta)
    if not math.isfinite(n):  # NaN/Inf, or finite values whose squares overflow: the exact check decides
        try:
            check_finite(delta, "delta")
        except InvalidWeightsError as exc:
            raise Rejected(exc.message) from None
    ratio = n / max(w, 1e-12)
    if not math.isfinite(ratio) or ratio > limit:
        raise Rejected(f"delta norm is {ratio:.3g}x the model's norm, over the limit of {limit:g}")
    return n, w


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
