"""How long a validator expects a re-training to take: per unit of work, from many re-trainings, not movable by one.

Usage (validator/retrain.py; one RetrainSpeed per validator, an object its state can hold):
    speed = RetrainSpeed()
    est = speed.over(recipe, wl, fingerprint, limit)       # seconds when the recipe is refused up front, else None
    clock = Clock()                                        # its tick() in the re-training's progress hook
    speed.record(fingerprint, contributor, recipe, wl, clock)   # once a re-training completed

A re-training's cost is modelled as ``setup + rate x units``: ``units`` is the recipe's work, steps x samples
per step (batch x grad_accum) x tokens per sample (context), read from its own parameters with the
ledger's workload as the default; ``rate`` is measured on the training loop alone, from its first
step's end to its last (the set-up, the data and the first step's warm-up are not in it), and
``setup`` is the rest. A 1-step recipe yields no rate. The estimate is the median of each over
the newest WINDOW re-trainings of the workload, one per contributor (its newest), and needs
MIN_SAMPLES of them: a validator that has fewer estimates from the recipe's own declared seconds,
as before. One PR, whatever its recipe, moves a median only to the next honest sample.

The estimate refuses a recipe up front only when the recipe's own declared seconds do not fit the
limit either (or it declares none): a recipe whose declared seconds fit is re-trained, and the
re-training's own deadline (limits.max_retrain_seconds) bounds what a wrong declaration costs.
An estimate only ever saves work: a wrong one can let a recipe be re-trained that then times out,
never refuse one that its own figures and the ledger's limits allow.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from dataclasses import dataclass

WINDOW = 15  # re-trainings of one workload the medians are taken over (one per contributor)
MIN_SAMPLES = 3  # fewer: the recipe's declared seconds estimate it


def _count(value, default: int) -> int:
    """A positive integer parameter, else ``default`` (a malformed value is the recipe check's to refuse)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return default


def work_units(recipe: dict, wl) -> int:
    """steps x batch x grad_accum x context of ``recipe``: its own parameters first, then the ledger's
    workload ``wl``'s (a parameter a workload does not have counts 1)."""
    params = recipe.get("params") if isinstance(recipe.get("params"), dict) else {}
    batch = _count(recipe.get("batch"), _count(params.get("batch_size"), _count(getattr(wl, "batch_size", 1), 1)))
    accum = _count(params.get("grad_accum"), _count(getattr(wl, "grad_accum", 1), 1))
    context = _count(params.get("context"), _count(getattr(wl, "context", 1), 1))
    return max(1, int(recipe["steps"])) * batch * accum * context


def declared_seconds(recipe: dict) -> float | None:
    s = recipe.get("seconds")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
        return None
    return float(s)


class Clock:
    """When a re-training started and when each of its steps ended (``tick`` from its progress hook)."""

    def __init__(self):
        self.start = time.perf_counter()
        self.first: float | None = None  # the end of the first step
        self.last: float | None = None  # the end of the latest step
        self.steps = 0

    def tick(self) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.last, self.steps = now, self.steps + 1


@dataclass(frozen=True)
class Sample:
    contributor: str
    setup: float  # seconds outside the loop's steps 2..n (loading, data, the first step)
    rate: float | None  # seconds per unit of work in steps 2..n; None from a 1-step re-training


class RetrainSpeed:
    """This validator's re-training samples, per workload fingerprint (see the module docstring)."""

    def __init__(self, window: int = WINDOW, least: int = MIN_SAMPLES):
        self.window, self.least = window, least
        self.samples: dict[str, deque[Sample]] = {}

    def record(self, fingerprint: str, contributor: str, recipe: dict, wl, clock: Clock) -> None:
        """A completed re-training of ``recipe`` (timed by ``clock``); the contributor's older sample goes."""
        end = clock.last if clock.last is not None else time.perf_counter()
        rate = None
        if clock.steps >= 2 and clock.first is not None:
            per_step = work_units({**recipe, "steps": 1}, wl)
            rate = (end - clock.first) / ((clock.steps - 1) * per_step)
        setup = (clock.first - clock.start) if clock.first is not None else end - clock.start
        if rate is not None:  # the first step's own work is the loop's, not set-up
            setup -= rate * work_units({**recipe, "steps": 1}, wl)
        kept = self.samples.setdefault(fingerprint, deque())
        for old in [s for s in kept if s.contributor == contributor]:
            kept.remove(old)
        kept.append(Sample(contributor, max(0.0, setup), rate))
        while len(kept) > self.window:
            kept.popleft()

    def estimate(self, recipe: dict, wl, fingerprint: str) -> float | None:
        """Seconds a re-training of ``recipe`` takes here: the medians of this workload's samples; None with
        fewer than MIN_SAMPLES of them."""
        kept = self.samples.get(fingerprint, ())
        rates = [s.rate for s in kept if s.rate is not None]
        if len(rates) < self.least:
            return None
        setup = statistics.median(s.setup for s in kept)
        return setup + statistics.median(rates) * work_units(recipe, wl)

    def over(self, recipe: dict, wl, fingerprint: str, limit: float) -> float | None:
        """The estimated seconds when ``recipe`` is refused before any work (over ``limit``), else None:
        only when the recipe's own declared seconds are over it too, or it declares none."""
        declared = declared_seconds(recipe)
        if declared is not None and declared <= limit:
            return None  # its own figures fit: re-trained, under the limit's deadline
        est = self.estimate(recipe, wl, fingerprint)
        est = declared if est is None else est
        return est if est is not None and est > limit else None
