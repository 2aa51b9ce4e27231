"""The verdict a validator records on one PR, and the crash tests' failpoints.

Usage:
    v = Verdict(pr.id, False, "rejected", "reason"); v.to_json()
    failpoint("before-push")          # kill -9 here when WOOLF_FAILPOINT=before-push
"""

from __future__ import annotations

import os
import signal
from dataclasses import asdict, dataclass, field


def failpoint(name: str) -> None:
    """Crash tests set WOOLF_FAILPOINT to kill -9 this process at a named step."""
    if os.environ.get("WOOLF_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Verdict:
    id: str
    accepted: bool
    state: str
    reason: str
    contributor: str | None = None
    base_version: int | None = None
    version: int | None = None
    staleness: int | None = None
    attenuation: float | None = None
    metrics: dict = field(default_factory=lambda: {"before": None, "after": None})
    timings: dict = field(default_factory=dict)
    device: str | None = None  # where the metrics were evaluated (describe_device); None: not evaluated here
    scores: dict | None = None  # validator/score.py: assigned vs random shard improvement
    flags: list = field(default_factory=list)  # e.g. not-unique, clipped (marked, not rejected)
    content: str | None = None  # sha256 of the delta's tensors
    delta_norm: float | None = None
    clip: float | None = None  # the factor the delta was clipped by, when it was
    retrain: dict | None = None  # {"retrain": matched | mismatch | not drawn | ..., "distance", ...}

    def to_json(self) -> dict:
        return asdict(self)
