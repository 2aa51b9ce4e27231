"""The acceptance policy: does the candidate beat current by enough?

Usage:
    decision = decide(PolicyConfig(min_improvement=-0.01), before={"loss": 2.0}, after={"loss": 1.99})
    decision.accepted, decision.improvement, decision.reason
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from woolf.protocol.config import PolicyConfig


@dataclass(frozen=True)
class Decision:
    accepted: bool
    improvement: float  # positive = candidate better, in the metric's units
    reason: str


def decide(cfg: PolicyConfig, before: dict, after: dict) -> Decision:
    if cfg.metric not in before or cfg.metric not in after:
        return Decision(False, float("nan"), f"evaluation did not report metric {cfg.metric!r}")
    b, a = float(before[cfg.metric]), float(after[cfg.metric])
    if not math.isfinite(a):
        return Decision(False, float("nan"), f"candidate {cfg.metric} is not finite ({a})")
    improvement = (b - a) if cfg.direction == "minimize" else (a - b)
    if improvement >= cfg.min_improvement:
        return Decision(
            True,
            improvement,
            f"{cfg.metric} {b:.4f} -> {a:.4f} (improvement {improvement:+.4f} >= {cfg.min_improvement:+.4f})",
        )
    return Decision(
        False,
        improvement,
        f"{cfg.metric} {b:.4f} -> {a:.4f}: improvement {improvement:+.4f} "
        f"is below the required {cfg.min_improvement:+.4f}",
    )
