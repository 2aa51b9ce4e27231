"""Named wall-clock timers that add up, for the timings recorded in verdicts and benchmarks.

Usage:
    timer = Timer()
    with timer("load"):
        ...
    dict(timer)      # {"load": 0.0123}
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class Timer(dict):
    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = round(self.get(name, 0.0) + time.perf_counter() - t0, 4)
