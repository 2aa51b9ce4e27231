"""Helpers shared by the benchmarks: machine description, timing, result files.

Usage:
    from common import machine, timed, write_json
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import time
from pathlib import Path

# WOOLF_BENCH_RESULTS redirects output (the smoke tests write to a temp dir, not over recorded results)
RESULTS = Path(os.environ.get("WOOLF_BENCH_RESULTS", Path(__file__).parent / "results"))


def machine() -> dict:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1),
            "python": platform.python_version(), "torch": torch.__version__,
            "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_json(name: str, data) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def floor(obj: Path, tmp: Path) -> dict:
    """``cp`` then ``md5sum`` of a version's object (after a sync): what the bytes of one version
    require here, the floor the validator's own work is measured against (validator_floor, gpu_check)."""
    os.sync()
    t0 = time.perf_counter()
    subprocess.run(["cp", str(obj), str(tmp)], check=True)
    t1 = time.perf_counter()
    subprocess.run(["md5sum", str(tmp)], check=True, capture_output=True)
    t2 = time.perf_counter()
    tmp.unlink()
    return {"bytes": obj.stat().st_size, "cp": round(t1 - t0, 3), "md5sum": round(t2 - t1, 3),
            "seconds": round(t2 - t0, 3)}
