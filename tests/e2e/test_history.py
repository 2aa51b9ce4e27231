"""The worked example (examples/bad_merge.py) runs: bisect finds the poisoned merge, revert recovers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_worked_example_runs(tmp_path):
    root = Path(__file__).parents[2]
    proc = subprocess.run([sys.executable, str(root / "examples" / "bad_merge.py"), str(tmp_path / "ex")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "200",
                               "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "first bad version: v3" in proc.stdout and "mallory" in proc.stdout
    assert "carol (revert of v3)" in proc.stdout
