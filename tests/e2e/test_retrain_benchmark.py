"""benchmarks/retrain_devices.py at a tiny size: segments committed on the CPU replay there bit for bit
(no timings asserted; the GPU rows run in benchmarks/gpu_check.py when a GPU is lent)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "benchmarks"


def test_retrain_devices_cpu_to_cpu():
    sys.path.insert(0, str(BENCH))
    from retrain_devices import cross_device

    rows = cross_device("cpu", "cpu", seeds=1, steps=4, every=2)
    assert len(rows) == 2 and all(r["exact"] and r["fingerprints_equal"] and r["distance"] == 0.0 for r in rows)
