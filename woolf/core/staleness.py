"""Attenuation of a stale delta as a function of its staleness.

Usage:
    attenuation(StalenessConfig(kind="inverse"), staleness=1)   # 0.5
"""

from __future__ import annotations

from woolf.protocol.config import StalenessConfig


def attenuation(cfg: StalenessConfig, staleness: int) -> float:
    """Weight in (0, 1] for a delta trained ``staleness`` versions ago.

    inverse 1/(1+s); polynomial (1+s)^-a; hinge 1 up to b then 1/(a(s-b)+1)
    (FedAsync's forms); constant 1.
    """
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    s = float(staleness)
    if cfg.kind == "inverse":
        return 1.0 / (1.0 + s)
    if cfg.kind == "polynomial":
        return (1.0 + s) ** (-cfg.a)
    if cfg.kind == "hinge":
        return 1.0 if s <= cfg.b else 1.0 / (cfg.a * (s - cfg.b) + 1.0)
    if cfg.kind == "constant":
        return 1.0
    raise ValueError(f"unknown staleness function {cfg.kind!r}")
