"""Peak memory of each command on a synthetic ledger, as /usr/bin/time -v sees it (benchmarks §13).

Usage:
    python benchmarks/peak_memory.py --params 250e6           # 1 GB of float32 (about 3 minutes)
    python benchmarks/peak_memory.py --params 2e9 --tensors 64   # 8 GB: needs ~12 GB free RAM, 40 GB disk
    python benchmarks/peak_memory.py --params 1e6             # the smoke size the tests run

Each command is a whole `python -m woolf ...` process under `/usr/bin/time -v`, in the order
a ledger sees them: init; alice's clone train, submit; a validator's clone validate --all; a
fresh clone audit, a fresh clone checkout of version 1 from storage (the object not cached),
alice's pull of version 1. The synthetic workload's training is a seeded step and its
evaluation one pass, so what is measured is the ledger's own memory (the weights, the delta,
the candidate) and the interpreter's. Reported per command: maximum RSS, that over the
model's bytes, wall seconds. Results go to benchmarks/results/peak_memory_<params>.json.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    from woolf.git.repo import clean_env

    return {**clean_env(), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WOOLF_DEVICE": "cpu"}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=_env())


def timed_cli(name: str, args: list[str], cwd: Path, rows: list, model_bytes: int) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "woolf", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=_env())
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    row = {"command": name, "argv": "woolf " + " ".join(args), "peak_rss_mib": round(rss_kib / 1024, 1),
           "x_model": round(rss_kib * 1024 / model_bytes, 3), "seconds": round(secs, 2)}
    rows.append(row)
    print(f"{name:>9}: peak RSS {row['peak_rss_mib']:>9.1f} MiB = {row['x_model']:.3f} x model, "
          f"{secs:.1f} s", flush=True)
    return row


def run(params: int, tensors: int, workdir: Path | None) -> dict:
    model_bytes = params // tensors * tensors * 4
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="woolf-mem-", dir=workdir) as tmp:
        root = Path(tmp)
        timed_cli("init", ["init", "work", "--unsigned", "--workload", "synthetic",
                           "--storage", str(root / "storage"),
                           "--set", f"workload.params.n_params={params}",
                           "--set", f"workload.params.n_tensors={tensors}",
                           "--set", "policy.min_improvement=-1e9"], root, rows, model_bytes)
        _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
        def clone(name):
            _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
            _git("config", "user.name", name, cwd=root / name)

        clone("alice")
        clone("val")
        timed_cli("train", ["train", "--steps", "1", "--contributor", "alice"], root / "alice", rows, model_bytes)
        timed_cli("submit", ["submit", "--contributor", "alice"], root / "alice", rows, model_bytes)
        timed_cli("validate", ["validate", "--all", "--name", "val"], root / "val", rows, model_bytes)
        clone("carol")
        clone("dave")
        timed_cli("audit", ["audit"], root / "carol", rows, model_bytes)
        timed_cli("checkout", ["checkout", "1", "-o", str(root / "v1.safetensors")], root / "dave", rows,
                  model_bytes)
        timed_cli("pull", ["pull"], root / "alice", rows, model_bytes)
    return {"params": params, "tensors": tensors, "model_bytes": model_bytes, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=250e6)
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--workdir", type=Path, default=None, help="Where the ledgers go (default: the temp dir).")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    params = int(a.params)
    data = {"machine": machine(), "load_average": os.getloadavg(), **run(params, a.tensors, a.workdir)}
    path = write_json(a.out or f"peak_memory_{params:.0e}.json".replace("+", ""), data)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
