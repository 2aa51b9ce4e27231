"""Contribution scores measured a few windows at a time, until what they decide is settled.

Usage (validator/score.py score_delta, under `validators.eval = "sequential"`):
    out = sequential_scores(ctx, shards, base, base_commit, after, seed)
    out = settle_scores(measure, sizes, seed, cfg)    # the loop alone: measure(shard, windows) -> (before, after)
    # {"assigned", "random", "randoms", "difference", "tokens"}, or {"assigned", "tokens"} when the assigned
    # shard alone settles a refusal (scoring.min_assigned)

Each shard's sample (the assigned one, then the random ones) is cut into windows; they are measured
in an order drawn from the scoring seed, a block at a time (at most core.sequential.LOOKS blocks), on
the base weights ("before": kept per base version and shard, validator/windows.py, so every PR judged
against the same main reads main's instead of evaluating it again) and on base + delta ("after"),
paired by window. After each block the improvements give an interval for each shard's mean over its
whole sample, and for assigned minus random. Measuring stops when every decision in force is
settled at `validators.confidence`:

- `scoring.min_assigned` (when set): a refusal stops early; a pass needs the whole assigned sample,
- `scoring.uniqueness = "reject"`: a refusal (random improved as much) stops early; a pass needs
  every sample whole,
- `scoring.uniqueness = "mark"`: the mark's side, either way (not settled: every sample whole),
- the effect stage's "changes nothing measurable" (`scoring.min_effect`, after the gate: score.py
  effect_reason): the assigned shard's mean settled outside +-min_effect, or its whole sample (so a
  delta whose whole sample says "nothing" is never passed on a block that happened to say more),
- nothing else in force (`"off"`, no floor): once the effect is settled.

So a refusal is made on fewer windows only when the whole sample would make it but for an error of
at most ``1 - confidence``; a pass is the whole sample's; the recorded scores are the means over the
windows measured, and "tokens" says how many tokens (bytes, for a byte-level model) that was, all
shards together. Base and base + delta are two models in memory while scoring runs (main is not read
again for the merge).
"""

from __future__ import annotations

import math

from woolf.core.scores import improvement
from woolf.core.sequential import Interval, alpha_per_look, block_ends, combined, interval, window_order
from woolf.validator.context import ValidatorContext
from woolf.validator.windows import window_losses


def sequential_scores(ctx: ValidatorContext, shards: list[bytes], base: dict, base_commit: str, after: dict,
                      seed: str) -> dict:
    """The scores of ``after`` - ``base`` on ``shards`` (assigned first); see the module's docstring. Raises
    ValueError when a shard has no whole window (the caller records no scores, as for a short shard)."""
    cfg, wl = ctx.ledger.config, ctx.ledger.workload()

    def measure(j: int, idx: list[int]) -> tuple[list[float], list[float]]:
        return (window_losses(ctx, base_commit, base, shards[j], idx),
                window_losses(ctx, None, after, shards[j], idx))

    return settle_scores(measure, [wl.windows(s) for s in shards], seed, cfg, wl.LINEAR_METRICS[cfg.policy.metric])


def settle_scores(measure, sizes: list[tuple[int, int]], seed: str, cfg, factor: float = 1.0) -> dict:
    """The loop of sequential_scores over ``measure(shard, windows) -> (base's losses, after's losses)`` and each
    shard's (windows, tokens per window); ``cfg``: the ledger's config (scoring, policy, validators)."""
    direction = cfg.policy.direction
    if any(n == 0 for n, _ in sizes):
        raise ValueError("a scoring shard is shorter than one window")
    orders = [window_order(f"score:{seed}:{j}", n) for j, (n, _) in enumerate(sizes)]
    ends = [block_ends(n) for n, _ in sizes]
    alpha = alpha_per_look(cfg.validators.confidence, max(1, max(len(e) for e in ends) - 1))
    diffs: list[list[float]] = [[] for _ in sizes]
    look, verdict = 0, None
    while verdict is None:
        for j in range(len(sizes)):
            if look < len(ends[j]):
                before, got = measure(j, orders[j][len(diffs[j]):ends[j][look]])
                diffs[j] += [factor * improvement(b, a, direction) for b, a in zip(before, got, strict=True)]
        ivs = [interval(d, n, alpha) for d, (n, _) in zip(diffs, sizes, strict=True)]
        look += 1
        verdict = _settled(cfg, ivs, alpha)
    tokens = sum(len(d) * size for d, (_, size) in zip(diffs, sizes, strict=True))
    if verdict == "floor":
        return {"assigned": _finite(ivs[0].mean), "tokens": tokens}
    randoms = [_finite(iv.mean) for iv in ivs[1:]]
    out = {"assigned": _finite(ivs[0].mean), "random": sum(randoms) / len(randoms), "randoms": randoms}
    out["difference"] = out["assigned"] - out["random"]
    out["tokens"] = tokens
    return out


def _settled(cfg, ivs: list[Interval], alpha: float) -> str | None:
    """"floor" (the assigned shard settles a refusal by scoring.min_assigned), "done" (every decision in force
    is settled, or every sample is whole), or None (measure another block)."""
    s = cfg.scoring
    assigned = ivs[0]
    if math.isfinite(s.min_assigned):
        if not math.isfinite(assigned.mean) or assigned.below(s.min_assigned) or (
                assigned.complete and not assigned.mean >= s.min_assigned):
            return "floor"
    if all(iv.complete or not math.isfinite(iv.mean) for iv in ivs):
        return "done"
    pending = []
    if math.isfinite(s.min_assigned):
        pending.append(assigned.complete)  # a pass is the whole sample's
    if s.min_effect > 0:  # the effect stage's "changes nothing measurable": settled outside +-min_effect, or whole
        pending.append(assigned.complete or assigned.below(-s.min_effect) or assigned.above(s.min_effect))
    if s.uniqueness != "off":
        k = len(ivs) - 1
        diff = combined([(1.0, assigned)] + [(-1.0 / k, iv) for iv in ivs[1:]], alpha)
        if s.uniqueness == "reject":
            pending.append(diff.below(0.0) or all(iv.complete for iv in ivs))
        else:  # "mark": either side
            pending.append(diff.below(0.0) or diff.above(0.0) or diff.half == 0.0)
    return "done" if all(pending) else None


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -1e9
