"""benchmarks/retrain_check.py and retrain_devices.py at a tiny size (issue 34; no timings asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "benchmarks"


def test_retrain_check_smoke(tmp_path):
    env = {**os.environ, "WOOLF_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(BENCH / "retrain_check.py"), "--smoke", "--out", "r.json"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())
    honest = [r for r in data["distances"]["small"] if r["case"] == "honest, same machine"]
    assert honest and all(r["distance"] == 0 for r in honest)
    assert data["end_to_end"]["false_rejections"] == 0 and data["end_to_end"]["matched"] == 2
    assert data["state"][0]["state_bytes"] > data["state"][0]["delta_bytes"]


def test_retrain_devices_cpu_to_cpu():
    sys.path.insert(0, str(BENCH))
    from retrain_devices import cross_device

    [row] = cross_device("cpu", "cpu", seeds=1, steps=3)
    assert row["distance"] == 0.0 and row["within_default_tolerance"]
