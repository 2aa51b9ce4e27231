"""Bounds no attacker sets: the norm guard's reference weighed by standing, with a floor
from the model's own scale, and the drawdown reference as the best version ever reached.

Usage:
    b = norm_bound(all_norms, standing_norms, model_norm, multiple=10.0, least=2)
    b.limit, b.source                  # the largest delta norm allowed; "median" | "standing" | "floor"
    best = best_of([4.25, 4.21, 4.30], "minimize")       # 4.21

Pure arithmetic (no I/O): the validator's woolf/validator/standing.py and drawdown.py read the
norms, the keyed names and the versions' metrics and call these.

The norm guard refuses a delta over ``multiple`` x a median of recent merged norms. That median
is everyone's to move: two keyless Sybils that merge noise of norm 0.04 put it at 0.04 and lock
out every honest delta. Here the median may only be *raised* above what
contributors with standing (a key in allowed_signers: their merges carry their signature) set,
never lowered under it, and it never falls under FLOOR_RATIO of the model's own norm.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

FLOOR_RATIO = 0.01  # the median reference is never under 1% of the model's norm (limit: multiple x that)


@dataclass(frozen=True)
class NormBound:
    limit: float  # the largest delta norm allowed
    source: str  # what set it: "median" (everyone's), "standing" (keyed contributors'), "floor" (the model's)

    @property
    def note(self) -> str:
        """Words for a rejection reason when the bound is not the plain median."""
        return {"median": "", "standing": ", as contributors with a key set it",
                "floor": f", raised to the floor of {FLOOR_RATIO:g}x the model's norm"}[self.source]


def _finite(xs) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x) and x > 0]


def norm_bound(median_limit: float | None, standing_norms: list[float], model_norm: float,
               multiple: float) -> NormBound | None:
    """The norm guard's limit: the largest of ``median_limit`` (the guard's own, from everyone's merges;
    None when too few), ``multiple`` x the median of ``standing_norms`` (one per keyed contributor)
    and ``multiple`` x FLOOR_RATIO x ``model_norm``. None when the guard is off (multiple <= 0) or has
    no reference yet (``median_limit`` None: standing and the floor only raise a bound, never set one)."""
    standing = _finite(standing_norms)
    if multiple <= 0 or median_limit is None:
        return None  # no reference yet: standing and the floor raise the guard's bound, they set none
    candidates = []
    if median_limit is not None and math.isfinite(median_limit):
        candidates.append((median_limit, "median"))
    if standing:
        candidates.append((multiple * statistics.median(standing), "standing"))
    if math.isfinite(model_norm) and model_norm > 0:
        candidates.append((multiple * FLOOR_RATIO * model_norm, "floor"))
    if not candidates:
        return None
    limit, source = max(candidates, key=lambda c: c[0])
    return NormBound(limit, source)


def best_of(values, direction: str = "minimize") -> float | None:
    """The best of ``values`` (finite numbers only) under ``direction``; None when there is none."""
    ok = _finite_any(values)
    if not ok:
        return None
    return min(ok) if direction == "minimize" else max(ok)


def _finite_any(xs) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]
