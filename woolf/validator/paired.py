"""The gate, paired and sequential: the candidate evaluated on the benchmark's windows in a drawn order, a few
at a time, against main's losses on the same windows (kept: main is evaluated once per head); with
`validators.early_reject` a rejection stops as soon as it is settled.

Usage (the "gate" stage, validator/stages.py, under `validators.eval = "sequential"`):
    if sequential(ctx):                                       # validator/windows.py
        before = main_metrics(ctx, main, current, timer)      # every window of main's, kept (windows.py)
        refused = paired_gate(ctx, cand, bench, before)       # fills cand.metrics and cand.reason

Main's loss on every window is known before the candidate is evaluated (kept per main commit: one
evaluation of main per head, and none when it is a candidate this validator merged). The candidate's
windows are drawn in an order from the scoring seed (score.score_seed: main's commit, salted with
the hidden benchmark when there is one), in at most core.sequential.LOOKS blocks; after each block the
paired improvement (main's loss minus the candidate's, per window, in the policy metric's units) gives
an interval for its mean over every window (Student's t, finite population, alpha split over the
looks). With `validators.early_reject` (off by default), once that interval lies wholly below what the
policy requires, the PR is rejected: the full benchmark would have accepted it at most ``1 -
validators.confidence`` of the time when the per-window improvements are roughly normal, and far more
often when a few windows carry the improvement (measured: benchmarks/RESULTS.md §23). Otherwise every
window is evaluated and the policy decides on the full benchmark exactly as under "full": an
acceptance (and the metrics a version records) is always the whole benchmark's. Stopping early
only to reject is what makes the order's secrecy unneeded: a submitter who knows it can only get
its own PR rejected sooner, never a regression accepted on the windows that flatter it.

A rejection's recorded metrics are main's and the candidate's means over the windows measured, and
say so: "tokens" in Woolf-Metrics-Before/After (every gate's metrics carry it).
"""

from __future__ import annotations

import math

from woolf.core.policy import decide
from woolf.core.scores import improvement
from woolf.core.sequential import reject_early, window_order
from woolf.validator.candidate import Candidate
from woolf.validator.context import ValidatorContext
from woolf.validator.score import score_seed
from woolf.validator.windows import hold, kept, window_losses
from woolf.workloads.base import describe_device
from woolf.workloads.features import WINDOWS, features_of


def with_tokens(metrics: dict | None, tokens: int | None) -> dict | None:
    """``metrics`` saying on how many tokens (bytes, for a byte-level model) they were measured."""
    if metrics is None or tokens is None or "tokens" in metrics:
        return metrics
    return {**metrics, "tokens": tokens}


def benchmark_tokens(ctx: ValidatorContext, bench: bytes) -> int | None:
    """The tokens the whole benchmark predicts (None: the workload does not say)."""
    wl = ctx.ledger.workload()
    if WINDOWS not in features_of(wl):
        return None
    n, size = wl.windows(bench)
    return n * size


def main_metrics(ctx: ValidatorContext, main, current: dict, bench: bytes, timer) -> dict:
    """main's benchmark metrics from its loss on every window (kept per main commit: windows.py); ``current``
    must still be main's weights when any window is not kept yet (the merge stage asks before an in-place
    merge writes the candidate into them)."""
    wl = ctx.ledger.workload()
    n, size = wl.windows(bench)
    with timer("evaluation"):
        losses = window_losses(ctx, main.commit, current, bench, list(range(n)))
    before = ctx.state.eval_cache[main.commit] = with_tokens(wl.metrics_of(_mean(losses)), n * size)
    return before


def paired_gate(ctx: ValidatorContext, cand: Candidate, bench: bytes, before: dict, reference: dict) -> str | None:
    """The refusal's reason, or None when the policy accepts on the full benchmark; fills ``cand.metrics``
    and ``cand.reason`` (``reference``: main's metrics or the best recent version's, stages.gate_reference)."""
    cfg, step = ctx.ledger.config, cand.step
    policy, wl = cfg.policy, ctx.ledger.workload()
    n, size = wl.windows(bench)
    main = kept(ctx, cand.main.commit, bench)  # every window: main_metrics measured them first
    if len(main) < n:
        raise RuntimeError("main's benchmark windows were not all measured before the gate")
    # what the paired mean must reach: the policy's bar, moved by how far main is from the reference
    need = policy.min_improvement - improvement(float(reference[policy.metric]), float(before[policy.metric]),
                                                policy.direction)
    order = window_order(f"gate:{score_seed(ctx.ledger, cand.main)}", n)

    def measure(idx: list[int]) -> list[float]:
        with cand.timer("evaluation"):
            return wl.window_losses(step.probe, bench, idx, ctx.device)

    if cfg.validators.early_reject:
        got, iv = reject_early(measure, [main[i] for i in range(n)], order, need, cfg.validators.confidence,
                               wl.LINEAR_METRICS[policy.metric], policy.direction)
    else:  # every window, one pass (see ValidatorsConfig.early_reject); main's are still read, not measured
        got, iv = dict(zip(range(n), measure(list(range(n))), strict=True)), None
    if iv is not None:
        done = order[:len(got)]
        return _early(ctx, cand, [main[i] for i in done], [got[i] for i in done], iv, need, size, reference, before)
    probe = with_tokens(wl.metrics_of(_mean([got[i] for i in range(n)])), n * size)
    if step.applied and cand.pr is not None:
        hold(ctx, cand.pr.id, cand.main.commit, bench, got)  # the next main's, if this is published
    return _decided(ctx, cand, before, probe, reference)


def _decided(ctx, cand: Candidate, before: dict, probe: dict, reference: dict) -> str | None:
    cfg = ctx.ledger.config
    cand.device = describe_device(ctx.device)
    cand.metrics = {"before": before, "after": probe if cand.step.applied else before}
    if not cand.step.applied:
        cand.metrics["probe"] = probe
    decision = decide(cfg.policy, reference, probe)
    cand.reason = decision.reason if reference is before else f"{decision.reason} [best recent version]"
    return None if decision.accepted else cand.reason


def _early(ctx, cand: Candidate, main: list[float], got: list[float], iv, need: float, size: int, reference,
           before_all) -> str:
    """A rejection the windows measured so far settle: the metrics and reason say on how many tokens."""
    cfg, wl = ctx.ledger.config, ctx.ledger.workload()
    tokens = len(got) * size
    before = with_tokens(wl.metrics_of(_mean(main)), tokens)
    probe = with_tokens(wl.metrics_of(_mean(got)), tokens)
    cand.device = describe_device(ctx.device)
    cand.metrics = {"before": before, "after": probe if cand.step.applied else before}
    if not cand.step.applied:
        cand.metrics["probe"] = probe
    metric = cfg.policy.metric
    if not math.isfinite(iv.mean):
        cand.reason = f"candidate {metric} is not finite ({probe[metric]}) on {tokens} tokens of the benchmark"
        return cand.reason
    best = "" if reference is before_all else " [best recent version]"
    cand.reason = (f"{metric} {before[metric]:.4f} -> {probe[metric]:.4f} on {tokens} of {iv.population * size} "
                   f"tokens: improvement {iv.mean:+.4f} ± {iv.half:.4f} is below the required {need:+.4f} at "
                   f"{cfg.validators.confidence:.4g} confidence (validators.eval = \"sequential\"){best}")
    return cand.reason


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan
