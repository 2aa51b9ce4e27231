"""Sequential paired estimates: how far a mean over windows drawn so far can be from the mean over all of them.

Usage:
    idx = window_order("seed", 60)                     # a permutation of 0..59 drawn from the seed
    ends = block_ends(60)                              # [8, 16, ..., 60]: the looks, at most LOOKS
    iv = interval(diffs, population=60, alpha=alpha_per_look(0.99, len(ends)))
    iv.mean, iv.half, iv.below(-0.02)                  # the whole population's mean is below -0.02?
    t_quantile(0.995, 7)                               # Student's t, integer degrees of freedom
    got, iv = reject_early(measure, main, order, need=-0.02, confidence=0.999)   # the gate's loop

Pure arithmetic (no I/O): the validator's woolf/validator/paired.py (the gate) and seqscore.py
(scoring) evaluate windows in blocks and ask these whether the answer the whole population would give
is settled. The windows are drawn without replacement, so the interval shrinks with the finite
population correction and is exact (half-width 0) once every window is in. Each look spends
alpha / looks of the error (Bonferroni over the looks: conservative, valid however the looks fall),
and the interval uses Student's t with n - 1 degrees of freedom (fewer when fewer values are left to
draw than were drawn: the unknown part is then the mean of those few). A decision the whole population
would not make is taken with probability at most alpha when the per-window values are roughly
normal; with heavy tails (5-10% of the values at 5x the spread) about twice that at alpha = 0.001
(tests/core/test_sequential.py; on real PRs: benchmarks/RESULTS.md §21).
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

LOOKS = 8  # at most this many looks at one population (each spends alpha / looks)
LEAST_BLOCK = 4  # windows per look at least
LEAST_N = 8  # no interval is trusted on fewer windows (fewer than the whole population)


def window_order(seed: str, n: int) -> list[int]:
    """A permutation of range(n) drawn from ``seed`` (every validator with the same seed draws alike)."""
    idx = list(range(n))
    random.Random(hashlib.sha256(f"woolf-windows:{seed}".encode()).digest()).shuffle(idx)
    return idx


def block_ends(n: int, looks: int = LOOKS, least: int = LEAST_BLOCK) -> list[int]:
    """How many windows have been drawn at each look: equal blocks of at least ``least`` windows, the last
    one ending at ``n`` (at most ``looks`` looks)."""
    if n <= 0:
        return []
    size = max(least, math.ceil(n / looks))
    ends = list(range(size, n, size))
    return [*ends, n]


def alpha_per_look(confidence: float, looks: int) -> float:
    """The error each look may spend so that all looks together spend at most ``1 - confidence``."""
    return (1.0 - confidence) / max(1, looks)


def _t_cdf_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer ``df`` (the closed-form series in cos^2 of atan(t/sqrt(df)))."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return (2 / math.pi) * (theta + (s * math.cos(theta) * total if df > 1 else 0.0))
    term, total = 1.0, 1.0
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``df`` >= 1 degrees of freedom."""
    if not 0.5 < p < 1:
        raise ValueError("t_quantile takes p in (0.5, 1)")
    if df > 400:
        return NormalDist().inv_cdf(p)
    target = 2 * p - 1  # P(|T| < t)
    lo, hi = 0.0, 1.0
    while _t_cdf_two_sided(hi, df) < target:
        hi *= 2
        if hi > 1e12:
            return math.inf
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf_two_sided(mid, df) < target else (lo, mid)
    return hi


@dataclass(frozen=True)
class Interval:
    mean: float  # of the values drawn so far
    half: float  # half-width: the whole population's mean lies within mean +- half (inf: not trusted yet)
    n: int  # values drawn
    population: int

    @property
    def complete(self) -> bool:
        return self.n >= self.population

    def below(self, threshold: float) -> bool:
        """The whole population's mean is below ``threshold`` (settled)."""
        return self.mean + self.half < threshold

    def above(self, threshold: float) -> bool:
        """The whole population's mean is at or above ``threshold`` (settled)."""
        return self.mean - self.half >= threshold


def interval(values: list[float], population: int, alpha: float, least: int = LEAST_N) -> Interval:
    """Where the mean of all ``population`` values lies, from ``values`` drawn at random without replacement,
    at error ``alpha`` (two-sided: each side alpha / 2). Exact once every value is drawn; infinitely wide
    below ``least`` values or when a value is not finite."""
    n = len(values)
    mean = math.fsum(values) / n if n else math.nan
    if n >= population:
        return Interval(mean, 0.0, n, population)
    if n < max(2, least) or not math.isfinite(mean):
        return Interval(mean, math.inf, n, population)
    var = math.fsum((x - mean) ** 2 for x in values) / (n - 1)
    se = math.sqrt(var / n * (1 - n / population))
    # late in a small population the unknown part is the mean of the few values not drawn yet: its spread
    # is known as well as so few values allow, so the degrees of freedom are those of the smaller part
    df = max(1, min(n, population - n) - 1)
    return Interval(mean, t_quantile(1 - alpha / 2, df) * se, n, population)


def combined(parts: list[tuple[float, Interval]], alpha: float) -> Interval:
    """The interval of sum(weight * part mean) over independent parts (a shard's mean minus the mean of
    others): their variances add; the t quantile takes the fewest degrees of freedom among them
    (conservative). Exact when every part is; infinitely wide when any part is not trusted yet."""
    mean = math.fsum(w * iv.mean for w, iv in parts)
    if all(iv.half == 0.0 for _, iv in parts):
        return Interval(mean, 0.0, sum(iv.n for _, iv in parts), sum(iv.population for _, iv in parts))
    if any(not math.isfinite(iv.half) for _, iv in parts):
        return Interval(mean, math.inf, sum(iv.n for _, iv in parts), sum(iv.population for _, iv in parts))
    var = 0.0
    df = min(_df(iv) for _, iv in parts if iv.half > 0)
    for w, iv in parts:
        if iv.half > 0:  # back from its own half-width to its standard error
            var += (w * iv.half / t_quantile(1 - alpha / 2, _df(iv))) ** 2
    half = t_quantile(1 - alpha / 2, df) * math.sqrt(var)
    return Interval(mean, half, sum(iv.n for _, iv in parts), sum(iv.population for _, iv in parts))


def _df(iv: Interval) -> int:
    return max(1, min(iv.n, iv.population - iv.n) - 1)


def reject_early(measure: Callable[[list[int]], list[float]], main: Sequence[float], order: list[int], need: float,
                 confidence: float, factor: float = 1.0,
                 direction: str = "minimize") -> tuple[dict[int, float], Interval | None]:
    """The gate's sequential loop: the candidate's loss on each window of ``order`` measured block by block
    (``measure(windows) -> losses``), paired with ``main``'s loss on the same window (improvement in the
    metric's units: ``factor`` times the loss difference, signed by ``direction``), until the interval of the
    mean improvement over every window lies below ``need`` (or a candidate loss is not finite). Returns
    (the candidate's losses by window, the interval that settled the rejection), or (every window's, None):
    the whole benchmark decides."""
    n = len(order)
    ends = block_ends(n)
    alpha = alpha_per_look(confidence, len(ends) - 1)
    got: dict[int, float] = {}
    sign = 1.0 if direction == "minimize" else -1.0
    for end in ends:
        idx = order[len(got):end]
        got.update(zip(idx, measure(idx), strict=True))
        iv = interval([sign * factor * (main[i] - got[i]) for i in order[:end]], n, alpha)
        if not iv.complete and (iv.below(need) or not math.isfinite(iv.mean)):
            return got, iv
    return got, None
