"""One PR's evaluation as an ordered list of stages over one candidate record (validator/candidate.py).

Usage (step.evaluate runs them all; CI's apply job and step.candidate a part):
    cand = Candidate(pr, main, timer)
    refused = run(ctx, cand, STAGES)      # the reason a stage refused the PR, or None; raises Rejected

STAGES, in order; each is a plain function ``(ctx, cand)`` over the validator's context
(validator/context.py) and the record. It fills its part of the record, and refuses the PR by raising
Rejected (a check) or by returning the reason (a judgment of what it measured):
    submitter    the PR's id, submission.json and signature name one contributor (protocol/rules/submitter.py)
    admission    cheap checks of its git objects, before any weights are read (admission.py)
    queue_limit  over its contributor's open-PR limit: rejected unread (screen.py)
    recipe       the recipe's and its proof's rules, the audit's draw and time; a drawn PR challenged (retrain.py)
    staleness    its base's staleness and the merge's attenuation, from ancestry and the config
    load         main's weights (kept in memory or read: resident.py) and the PR's delta (delta_load.py)
    norm_guard   the delta finite, its norm within limits.max_delta_norm_ratio of the model's
    screen       no-op, the norm guard by standing, replays, copies (screen.py)
    score        its assigned shard against random ones (score.py): a delta that learned nothing is refused
    retrain      a drawn PR's audit: its segments replayed bit for bit from the served states (audit_proof.py)
    merge        the merge rule (ledger/transition.py), in main's memory where it can
    gate         the benchmark: main's metrics (once per head) against the candidate's, the policy decides
                 (under `validators.eval = "sequential"`: main's windows kept, paired.py; with
                 `validators.early_reject` a settled rejection stops early)
    effect       a delta that changes nothing measurable (score.py)
    drawdown     never further than policy.max_drawdown behind the best version reached (drawdown.py)

One model in memory: the merge writes the candidate into main's weights (in place), a stale PR's
scoring drops them while it reads its base version, and a PR refused before anything wrote into them
gives them back for the next one (resident.py). The delta's storage hashes run beside its checks and
merge; nothing of them takes effect before they are settled (``run`` on a failure, the caller before
its verdict: step.evaluate).
"""

from __future__ import annotations

import math

from woolf.core.merge_rules import Rule
from woolf.core.policy import decide
from woolf.core.scores import norm
from woolf.core.staleness import attenuation
from woolf.errors import InvalidWeightsError, Rejected
from woolf.ledger.benchmark import gate_benchmark, published_reason
from woolf.ledger.transition import parent_state, streamable, transition
from woolf.protocol.rules.submitter import check_submitter
from woolf.storage.lazy import LazyTensors
from woolf.storage.weights import check_finite, spec_of
from woolf.timing import Timer
from woolf.validator.admission import admit
from woolf.validator.ahead import start_ahead
from woolf.validator.candidate import Candidate
from woolf.validator.context import ValidatorContext
from woolf.validator.copyindex import copy_index
from woolf.validator.delta_load import load_delta, settle
from woolf.validator.drawdown import drawdown_reason
from woolf.validator.paired import benchmark_tokens, main_metrics, paired_gate, with_tokens
from woolf.validator.resident import give_back, take_main
from woolf.validator.retrain import recipe_reason, retrain_check, retrain_record
from woolf.validator.score import effect_reason, judge_scores, score_delta
from woolf.validator.screen import check_queue, screen_delta
from woolf.validator.state import MergedDeltas
from woolf.validator.windows import sequential
from woolf.workloads.base import describe_device


def submitter(ctx: ValidatorContext, cand: Candidate) -> None:
    check_submitter(ctx.ledger, cand.pr, cand.main)


def admission(ctx: ValidatorContext, cand: Candidate) -> None:
    with cand.timer("checks"):
        cand.adm = admit(ctx.ledger, cand.pr, cand.main, merged_deltas(ctx, cand.main))


def queue_limit(ctx: ValidatorContext, cand: Candidate) -> None:
    with cand.timer("checks"):
        check_queue(ctx, cand.pr)


def recipe(ctx: ValidatorContext, cand: Candidate) -> None:
    with cand.timer("checks"):
        reason = recipe_reason(ctx, cand.adm)  # before any weights are read; a drawn PR waits here for the
        if reason:  # states its audit asked for (raises Deferred: validator/audit_wait.py)
            cand.retrain = retrain_record(cand.adm)
            raise Rejected(reason)


def staleness(ctx: ValidatorContext, cand: Candidate) -> None:
    adm = cand.adm
    cand.base_version, cand.staleness = adm.base.version, adm.staleness
    cand.attenuation = attenuation(ctx.ledger.config.merge.staleness, adm.staleness)


def load(ctx: ValidatorContext, cand: Candidate) -> None:
    """A parent version whose outer state is missing or does not fit raises IntegrityError/StorageError:
    nothing is merged on top of it (not the PR's fault)."""
    with cand.timer("load"):
        cand.current, cand.model_norm = take_main(ctx, cand.main)
    with cand.timer("load"):
        spec, main = spec_of(cand.current), cand.main
        cand.parent = parent_state(ctx.ledger, main, spec, f"outer state of version {main.version}")
        cand.delta = load_delta(ctx, cand.adm, spec)


def norm_guard(ctx: ValidatorContext, cand: Candidate) -> None:
    """(norm of the delta, norm of the model), float32-accumulated (scores.norm: plenty for a ratio,
    nothing big allocated); the screen reuses them instead of two more passes. A resident main's norm
    was measured already. A delta read from its file is sketched for the copy index in the same read."""
    limit = ctx.ledger.config.limits.max_delta_norm_ratio
    delta = cand.delta
    with cand.timer("checks"):
        w = norm(cand.current) if cand.model_norm is None else cand.model_norm
        if isinstance(delta, LazyTensors):
            n = copy_index(ctx.state).norm_and_sketch(cand.adm.meta["delta"]["sha256"], delta)
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
    cand.norms, cand.model_norm = (n, w), w


def screen(ctx: ValidatorContext, cand: Candidate) -> None:
    with cand.timer("checks"):
        cand.adm.screened = screen_delta(ctx, cand.adm, cand.main, cand.current, cand.delta, cand.norms)
    cand.flags = cand.adm.screened.flags


def score(ctx: ValidatorContext, cand: Candidate) -> str | None:
    """Before the merge, which reuses the delta's memory. Scoring reads a stale PR's base version: main's
    weights are dropped meanwhile (never two models) and read again by the merge."""
    spent: list = []
    if cand.adm.base.commit != cand.main.commit and ctx.ledger.config.scoring.enabled:
        cand.current.clear()
        spent.append("current")
    with cand.timer("scoring"):
        cand.scores = score_delta(ctx, cand.adm, cand.main, cand.current, cand.delta, spent)
    cand.spent = bool(spent)
    return judge_scores(ctx.ledger.config, cand)


def retrain(ctx: ValidatorContext, cand: Candidate) -> str | None:
    with cand.timer("retrain"):
        return retrain_check(ctx, cand)


def merge(ctx: ValidatorContext, cand: Candidate) -> None:
    """The screen clipped the delta already (Woolf-Delta-Clip). In place: main's metrics first, then the
    candidate written into main's memory tensor by tensor; the delta's hashes then run beside the
    evaluation, and the candidate is written ahead when the caller publishes it (validator/ahead.py)."""
    if cand.spent:
        with cand.timer("load"):
            cand.current.clear()  # dropped before the new copy is read: never three models at once
            cand.current.update(ctx.ledger.load_weights(cand.main))
    rule = Rule.from_config(ctx.ledger.config.merge)
    in_place = cand.in_place and streamable(rule, cand.current, cand.delta)
    if in_place:
        evaluate_before(ctx, cand.main, cand.current, cand.timer)
    with cand.timer("merge"):
        cand.step = transition(rule, cand.current, cand.parent, cand.delta, cand.attenuation, in_place=in_place)
    _hand_over(cand)
    if cand.write_ahead:
        start_ahead(ctx, cand.pr.id, cand.step.candidate)


def gate(ctx: ValidatorContext, cand: Candidate) -> str | None:
    """The metrics "after" are those of the weights that become the version; a FedBuff merge that only
    buffers leaves them unchanged and is judged by its delta on its own ("probe"). A hidden benchmark's
    numbers go to 0.01 in a rejection, like its metrics. Under `validators.eval = "sequential"` main's
    windows are kept (paired.py), and with `validators.early_reject` a settled rejection stops early."""
    cfg, step = ctx.ledger.config, cand.step
    bench = gate_benchmark(ctx.ledger)  # the hidden benchmark when the config pins one (ledger/benchmark.py)
    before = evaluate_before(ctx, cand.main, cand.current, cand.timer)  # measured already by an in-place merge
    tokens = benchmark_tokens(ctx, bench)
    before = with_tokens(before, tokens)
    reference = gate_reference(ctx, before)
    if sequential(ctx):
        refused = paired_gate(ctx, cand, bench, before, reference)
        return published_reason(cfg, refused) if refused else None
    with cand.timer("evaluation"):
        probe = with_tokens(ctx.ledger.workload().evaluate(step.probe, bench, ctx.device), tokens)
    cand.device = describe_device(ctx.device)
    cand.metrics = {"before": before, "after": probe if step.applied else before}
    if not step.applied:
        cand.metrics["probe"] = probe
    decision = decide(cfg.policy, reference, probe)
    cand.reason = decision.reason if reference is before else f"{decision.reason} [best recent version]"
    return None if decision.accepted else published_reason(cfg, cand.reason)


def effect(ctx: ValidatorContext, cand: Candidate) -> str | None:
    why = effect_reason(ctx.ledger.config, cand, cand.metrics["before"], _probe(cand))
    return published_reason(ctx.ledger.config, why) if why else None


def drawdown(ctx: ValidatorContext, cand: Candidate) -> str | None:
    why = drawdown_reason(ctx, cand.main, _probe(cand))
    return published_reason(ctx.ledger.config, why) if why else None


STAGES = (submitter, admission, queue_limit, recipe, staleness, load, norm_guard, screen, score, retrain, merge,
          gate, effect, drawdown)


def run(ctx: ValidatorContext, cand: Candidate, stages) -> str | None:
    """``stages`` in order until one refuses the PR: its returned reason (also ``cand.reason``), or None
    when all passed. A Rejected (or any failure) is raised, after ``_unwind``."""
    for stage in stages:
        try:
            refused = stage(ctx, cand)
        except BaseException as exc:
            _unwind(ctx, cand, exc)
            raise
        if refused:
            cand.reason = refused
            _hand_over(cand)  # a veto of what scoring or re-training measured: the verdict waits for the hashes
            return refused
    return None


def run_settled(ctx: ValidatorContext, cand: Candidate, stages) -> str | None:
    """``run``, the delta's storage hashes then settled at once (no verdict of the caller waits for them)."""
    refused = run(ctx, cand, stages)
    with cand.timer("verify"):
        settle_delta(ctx, cand.unsettled)
    return refused


def _unwind(ctx: ValidatorContext, cand: Candidate, exc: BaseException) -> None:
    """What a failing stage leaves, by how far the record got. Before main's weights were taken, or once
    the delta was handed over (``cand.unsettled``: settled before the verdict), nothing. While they were
    only read (load, the norm guard, the screen), a refusal gives them back for the next PR, and the
    delta's hashes are settled first: wrong ones are the reason, whatever the checks found. From scoring
    to the merge (which may write into them) any failure settles the hashes first."""
    if cand.current is None or cand.unsettled is not None:
        return
    if cand.adm.screened is None:
        if not isinstance(exc, Rejected):
            return  # the ledger's own failure (storage, outer state) or a bug: raised as it is
        give_back(ctx, cand.main, cand.current, cand.model_norm)
    with cand.timer("verify"):
        settle_delta(ctx, cand.delta)  # raises the hashes' Rejected instead, when they are wrong


def _hand_over(cand: Candidate) -> None:
    """The delta's storage hashes run from now on, beside the evaluation (validator/delta_load.py)."""
    if cand.delta is None or cand.unsettled is not None:
        return
    pending = getattr(cand.delta, "pending", None)
    if pending is not None:
        pending.start()
    cand.unsettled = cand.delta


def settle_delta(ctx: ValidatorContext, delta) -> None:
    """delta_load.settle; when the bytes were not the declared ones, what the copy index made of them goes."""
    try:
        settle(delta)
    except Rejected:
        key = getattr(delta, "declared_sha256", None)
        if key:
            copy_index(ctx.state).forget(key)
        raise


def _probe(cand: Candidate) -> dict:
    return cand.metrics.get("probe", cand.metrics["after"])


def merged_deltas(ctx: ValidatorContext, main) -> set[str]:
    """sha256 of every merged delta on ``main`` (admission's replay check), read once per main head."""
    cached = ctx.state.merged
    if cached and cached.main == main.commit:
        return cached.sha256s
    found = {v.delta_sha256 for v in ctx.ledger.log() if v.delta_sha256}
    ctx.state.merged = MergedDeltas(main.commit, found)
    return found


def evaluate_before(ctx: ValidatorContext, main, current, timer: Timer) -> dict:
    """main's benchmark metrics, measured once per main commit (``state.eval_cache``; under "sequential"
    from its loss on every window, kept across runs too: paired.py, windows.py)."""
    if sequential(ctx):
        return main_metrics(ctx, main, current, gate_benchmark(ctx.ledger), timer)
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
