"""Arithmetic of contribution scores, copies and norms (no I/O).

Usage:
    sim = similarity(delta, other)          # Similarity(cosine, copied_share)
    sim.is_copy(0.97)                        # scaled, noised, negated or partial copy
    content_sha256(delta)                    # the tensors' content, whatever the file's bytes
    norm(delta); norm_limit([norms...], multiple=10.0)   # Templar's guard: a multiple of the median
    per_contributor([(who, norm), ...], most=8)           # what the median is taken over: one per contributor
    improvement(before_loss, after_loss)     # positive = the delta helped
    noise = window_noise([scores, ...])      # one rating window's measurement noise of "difference"
    rank_score(state, scores, reason, noise) # one verdict's outcome in its rating window

A delta is compared tensor by tensor in float32: the whole-delta cosine catches
scaled and noised copies (and, by its sign, negations); the share of the delta's
squared norm carried by tensors that are each a copy catches partial copies. A tensor
the other delta holds as LoRA factors (its ``pair(name)``: storage/kinds/lora_file.py)
is compared in factor space, in float64 (core/lora.py product_dot, product_norm2): its
product is never expanded, whoever compares with it and however often.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass

import torch

from woolf.core.lora import product_dot, product_norm2
from woolf.core.scale import f32
from woolf.protocol.recipe import RETRAIN_PREFIX


@dataclass(frozen=True)
class Similarity:
    cosine: float  # of the whole deltas, flattened
    copied_share: float  # share of |delta|^2 in tensors whose own |cosine| passes the threshold

    def is_copy(self, threshold: float) -> bool:
        return abs(self.cosine) >= threshold or self.copied_share >= 0.5


def similarity(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], threshold: float,
               dtype: torch.dtype = torch.float32) -> Similarity:
    """Cosine of the whole deltas and the copied share, tensor by tensor in ``dtype`` (float64 for
    sketches: core/sketch.py); ``b``'s LoRA targets in factor space (module docstring)."""
    dot = na = nb = copied = 0.0
    pairs = getattr(b, "pair", None)
    for name in sorted(set(a) & set(b)):
        terms = _terms(a[name], b, name, dtype, pairs(name) if pairs is not None else None)
        if terms is None:
            continue
        d, xx, yy = terms
        dot, na, nb = dot + d, na + xx, nb + yy
        if xx > 0 and yy > 0 and abs(d) / math.sqrt(xx * yy) >= threshold:
            copied += xx
    if na <= 0 or nb <= 0 or not math.isfinite(dot + na + nb):
        return Similarity(0.0, 0.0)
    return Similarity(dot / math.sqrt(na * nb), copied / na)


def _terms(t: torch.Tensor, b, name: str, dtype: torch.dtype, pair) -> tuple[float, float, float] | None:
    """(<t, b[name]>, |t|², |b[name]|²); None when the tensors are not compared. ``pair``: b's
    (A, B, scale) of that tensor, its product never formed."""
    if pair is not None:
        A, B, scale = pair
        if not t.is_floating_point() or tuple(t.shape) != (B.shape[0], A.shape[1]):
            return None
        x = t.detach().to(dtype).reshape(-1)
        return product_dot(t, A, B, scale), float(x @ x), product_norm2(A, B, scale)
    x, y = (u.detach().to(dtype).reshape(-1) for u in (t, b[name]))
    if x.numel() != y.numel() or not t.is_floating_point():
        return None
    return float(x @ y), float(x @ x), float(y @ y)


def clip_delta(delta: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Each floating tensor times ``scale`` (float32, one rounding): the validator and the audit alike."""
    s = torch.tensor(f32(scale), dtype=torch.float32)
    return {k: torch.mul(t.to(torch.float32), s).to(t.dtype).contiguous() if t.is_floating_point() else t
            for k, t in delta.items()}


def norm(delta: dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float(torch.linalg.vector_norm(t, dtype=torch.float32)) ** 2
                         for t in delta.values() if t.is_floating_point()))


def norm_limit(recent: list[float], multiple: float, least: int = 3) -> float | None:
    """The largest norm allowed: ``multiple`` x the median of recent merged norms (None: under ``least``)."""
    usable = [n for n in recent if math.isfinite(n) and n > 0]
    if multiple <= 0 or len(usable) < max(1, least):
        return None
    return multiple * statistics.median(usable)


def per_contributor(recent: list[tuple[str, float]], most: int) -> list[float] | None:
    """The norms the guard's median is taken over, from recent merges (newest first): each contributor's median
    norm among them, for the newest ``most`` contributors, so a contributor that merged many tiny deltas (a
    flood of 3-step PRs) counts once and cannot drag the limit under everyone else's work. None when fewer
    than 3 merges or than 2 contributors are there: the caller then bounds a contributor by its own recent
    norms alone (one contributor's merges set no limit for anyone else: at the demo's size a flooder that
    merged first, alone, had every other delta refused as "over 10x the median")."""
    by: dict[str, list[float]] = {}
    for who, n in recent:
        who = who or ""  # merges of nobody's (disowned) PRs count as one contributor
        if isinstance(n, (int, float)) and math.isfinite(n) and n > 0 and (who in by or len(by) < most):
            by.setdefault(who, []).append(float(n))
    if len(by) < 2 or sum(len(v) for v in by.values()) < 3:
        return None
    return [statistics.median(v) for v in by.values()]


def content_sha256(delta: dict[str, torch.Tensor]) -> str:
    """sha256 of names, dtypes, shapes and raw bytes in name order: a re-saved file hashes alike."""
    h = hashlib.sha256()
    for name in sorted(delta):
        t = delta[name].detach().contiguous().cpu()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        if t.numel():  # the tensor's own memory, no copy of it
            h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def improvement(before: float, after: float, direction: str = "minimize") -> float:
    return (before - after) if direction == "minimize" else (after - before)


def unique(assigned: float, random: float) -> bool:
    """Gauntlet's check: a delta must help the data it was given more than random data."""
    return assigned > random


UNSCORED = -30.0  # a rejection before evaluation (a copy, a no-op, over the limit): below any score
SPREAD = 5.0  # measured outcomes lie in (-SPREAD, SPREAD): rank_score
LEARNED_NOTHING = "the delta removes"  # the start of scoring.min_assigned's reason (woolf/validator/score.py)


def _randoms(scores) -> list[float] | None:
    r = scores.get("randoms") if isinstance(scores, dict) else None
    if not isinstance(r, list) or not 2 <= len(r) <= 16:
        return None
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in r)
    return [float(x) for x in r] if ok else None


def window_noise(scores: list) -> float | None:
    """How far one verdict's ``difference`` moves by chance in this window: each verdict's random shards
    (data no delta trained on) differ only by chance; their variance, pooled over the window's measured
    verdicts (the caller leaves out refused ones: random deltas move nothing), times (1 + 1/k) for
    assigned minus the mean of k. None when no verdict measured two random shards (history from before
    them): differences are then used as they are."""
    var, k = [], 2
    for s in scores:
        r = _randoms(s)
        if r:
            m = sum(r) / len(r)
            var.append(sum((x - m) ** 2 for x in r) / (len(r) - 1))
            k = len(r)
    if not var or not sum(var) > 0:
        return None
    return math.sqrt(sum(var) / len(var) * (1 + 1 / k))


def learned_nothing(state: str, reason: str | None) -> bool:
    """A rejection by scoring.min_assigned: its scores are recorded, but it is refused like a copy."""
    return state != "merged" and isinstance(reason, str) and reason.startswith(LEARNED_NOTHING)


def retrain_failed(state: str, reason: str | None) -> bool:
    """A rejection for its re-training (woolf/validator/retrain.py): its delta is not what its
    recipe trains, so its scores say nothing about work done; it ranks with the deltas that learned nothing."""
    return state != "merged" and isinstance(reason, str) and reason.startswith(RETRAIN_PREFIX)


def rank_score(state: str, scores: dict | None, reason: str | None = None, noise: float | None = None) -> float:
    """One verdict's outcome in its rating window: when it was measured (merged or not: a gate rejection
    is often staleness, not cheating), its assigned-minus-random ``difference`` in units of the window's
    noise (window_noise; near genesis every difference is mostly chance and counts as little as one
    later), squashed into (-5, 5) by 5 tanh(x / 5); a rejection before evaluation, or a delta that learned
    nothing from its own shard (scoring.min_assigned: random deltas), ranks below every measured verdict;
    a merge without scores (history from before scoring) is 0.

    Bounded, so one verdict cannot buy a rating; strictly increasing, so different outcomes never tie.
    A clip to +-5 made every honest delta of a continued-training demo 5.0 (their differences are 5-15
    noise widths), and openskill's Plackett-Luce gives players tied at the top less than the one ranked
    below them (ranks 5, 5, -11, -30: mu 25.9, 25.9, 26.6, 23.6): the free-rider rose above both."""
    if learned_nothing(state, reason) or retrain_failed(state, reason):
        return UNSCORED
    diff = scores.get("difference") if isinstance(scores, dict) else None
    if not isinstance(diff, (int, float)) or isinstance(diff, bool) or not math.isfinite(diff):
        return UNSCORED if state != "merged" else 0.0
    x = float(diff) / noise if noise else float(diff)
    return SPREAD * math.tanh(x / SPREAD)
