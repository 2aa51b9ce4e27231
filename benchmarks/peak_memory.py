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

Floors (benchmarks/RESULTS.md §1, measured in the same run, in their own process, on the
version-0 object in storage, right after init, and again at the end unless --lean): R = the file read once
into memory, W = written once to a fresh file (a kernel copy minus R), H = md5 and sha256 of it
(woolf's own two-thread hashing), E = one synthetic evaluation of the weights in memory. Each
command's floor is the sum of the primitives it cannot avoid (FLOORS below), and its seconds
are reported against it; seconds include the interpreter's start and imports.

--lean (the default above 2 GB of weights) deletes what no later command reads, between
commands (the init's work tree once the hub is cloned, alice's trained file after submit, the
validator's and the auditor's clones after them, the checkout after it): the 2B run needs ~50 GB
of disk instead of ~90 GB. Free disk is recorded after every command.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
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


# the primitives each command cannot avoid (see the module docstring)
FLOORS = {
    "init": "E + W + H + R + W",          # evaluate genesis, write and hash it, copy it to storage
    "train": "H + E + W",                 # the base hashed as it is read, the trained weights evaluated, written
    "submit": "R + R + W + H + R + W",    # base and trained read, the delta written and hashed, copied to storage
    "validate": "H + H + 8*E + R + W + H + R + W",  # main and the delta verified; 6 scoring + 2 gate
                                                    # evaluations; main read again (scoring spent it);
                                                    # the candidate written, hashed, copied to storage
    "audit": "H + H + R + H",             # both versions' objects verified, the delta read, the merge hashed
    "checkout": "H + R + W",              # the object fetched and verified, copied out
    "pull": "H + R + W",
}

FLOOR_PROBE = r"""
import json, os, shutil, sys, time
from woolf.storage.files import hashes_of_file
from woolf.storage.weights import load_trusted, to_torch
from woolf.workloads.synthetic import Synthetic
src, tmp, n_params, n_tensors = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out = {}
os.sync()
t = time.perf_counter(); buf = bytearray(16 << 20)
with open(src, "rb", buffering=0) as fh:
    while fh.readinto(buf):
        pass
out["R"] = time.perf_counter() - t
os.sync()
t = time.perf_counter(); shutil.copyfile(src, tmp); out["C"] = time.perf_counter() - t
os.sync(); os.unlink(tmp)
out["W"] = max(out["C"] - out["R"], 0.0)
t = time.perf_counter(); hashes_of_file(src); out["H"] = time.perf_counter() - t
w = to_torch(load_trusted(src))
wl = Synthetic(n_params=n_params, n_tensors=n_tensors)
t = time.perf_counter(); wl.evaluate(w, wl.benchmark_bytes()); out["E"] = time.perf_counter() - t
print(json.dumps(out))
"""


def floors(root: Path, params: int, tensors: int) -> dict:
    objects = sorted((root / "storage").rglob("*"), key=lambda p: p.stat().st_size if p.is_file() else 0)
    src = objects[-1]  # the largest object in storage: a model's weights (version 0 after init)
    proc = subprocess.run([sys.executable, "-c", FLOOR_PROBE, str(src), str(root / "floor.tmp"), str(params),
                           str(tensors)], capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise SystemExit(f"floor probe failed:\n{proc.stderr[-3000:]}")
    got = {k: round(v, 2) for k, v in json.loads(proc.stdout).items()}
    print(f"   floors: {got}", flush=True)
    return got


def _free_gib(root: Path) -> float:
    return round(shutil.disk_usage(root).free / 2**30, 1)


def run(params: int, tensors: int, workdir: Path | None, lean: bool, sets: list[str] | None = None,
        floors_at: str = "both", copies_early: bool = False) -> dict:
    model_bytes = params // tensors * tensors * 4
    rows: list = []
    floor_runs: list = []
    with tempfile.TemporaryDirectory(prefix="woolf-mem-", dir=workdir) as tmp:
        root = Path(tmp)

        def drop(*paths):
            for p in paths if lean else ():
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink(missing_ok=True)
            if rows:
                rows[-1]["disk_free_gib_after"] = _free_gib(root)

        timed_cli("init", ["init", "work", "--unsigned", "--workload", "synthetic",
                           "--storage", str(root / "storage"),
                           "--set", f"workload.params.n_params={params}",
                           "--set", f"workload.params.n_tensors={tensors}",
                           "--set", "policy.min_improvement=-1e9",
                           # a delta is the model's size: the default 2 GiB limit refuses a 2B model's
                           "--set", f"limits.max_delta_bytes={max(2 << 30, 2 * model_bytes)}",
                           *[x for kv in (sets or []) for x in ("--set", kv)]], root, rows, model_bytes)
        _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
        def clone(name):
            _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
            _git("config", "user.name", name, cwd=root / name)

        clone("alice")
        clone("val")
        drop(root / "work")  # the hub and the storage hold everything later commands read
        early = []
        if copies_early:  # checkout and pull of version 0 beside train..validate (copies: ~0.06x, no model held)
            clone("dave")
            clone("erin")
            early = [threading.Thread(target=timed_cli, args=(name, argv, root / who, rows, model_bytes))
                     for name, argv, who in (("checkout", ["checkout", "0", "-o", str(root / "v0.safetensors")], "dave"),
                                             ("pull", ["pull"], "erin"))]
            for t in early:
                t.start()
        if floors_at in ("both", "start"):
            floor_runs.append(floors(root, params, tensors))
        timed_cli("train", ["train", "--steps", "1", "--contributor", "alice"], root / "alice", rows, model_bytes)
        drop()
        timed_cli("submit", ["submit", "--contributor", "alice"], root / "alice", rows, model_bytes)
        drop(root / "alice" / ".woolf" / "work" / "trained.safetensors")
        timed_cli("validate", ["validate", "--all", "--name", "val"], root / "val", rows, model_bytes)
        drop(root / "val")
        clone("carol")
        timed_cli("audit", ["audit"], root / "carol", rows, model_bytes)
        drop(root / "carol")
        for t in early:
            t.join()
        if early:
            drop(root / "v0.safetensors", root / "dave", root / "erin")
        else:
            clone("dave")
            timed_cli("checkout", ["checkout", "1", "-o", str(root / "v1.safetensors")], root / "dave", rows,
                      model_bytes)
            drop(root / "v1.safetensors", root / "dave")
            timed_cli("pull", ["pull"], root / "alice", rows, model_bytes)
            drop()
        if floors_at in ("both", "end") and not (lean and floor_runs):  # a second sample costs minutes at 2B
            floor_runs.append(floors(root, params, tensors))
        if not floor_runs:
            raise SystemExit("no floors measured (--floors none)")
    best = {k: min(f[k] for f in floor_runs) for k in floor_runs[0]}
    t0 = time.perf_counter()  # what every command pays before it touches a byte: interpreter, torch, dvc, woolf
    subprocess.run([sys.executable, "-c", "import torch, dvc.repo, woolf.cli.main"], check=True, env=_env())
    startup = round(time.perf_counter() - t0, 2)
    for row in rows:
        formula = FLOORS[row["command"]]
        if row["command"] == "validate" and "scoring.enabled=false" in (sets or []):
            formula = formula.replace("8*E", "2*E")  # the gate's two evaluations only
        row["floor_formula"] = formula
        row["floor_s"] = round(eval(formula, {}, best), 2)  # noqa: S307 - our own constant formulas
        row["x_floor"] = round(row["seconds"] / max(row["floor_s"], 1e-9), 2)
        row["x_floor_startup"] = round(row["seconds"] / max(row["floor_s"] + startup, 1e-9), 2)
        print(f"{row['command']:>9}: {row['seconds']:.1f} s vs floor {formula} = {row['floor_s']:.1f} s: "
              f"{row['x_floor']:.2f}x ({row['x_floor_startup']:.2f}x with the {startup:.1f} s start)", flush=True)
    return {"params": params, "tensors": tensors, "model_bytes": model_bytes, "rows": rows,
            "floors": floor_runs, "floors_best": best, "startup_s": startup, "lean": lean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=250e6)
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--workdir", type=Path, default=None, help="Where the ledgers go (default: the temp dir).")
    ap.add_argument("--out", default=None)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="More config for init (e.g. scoring.enabled=false: validate without scoring's 6 evaluations).")
    ap.add_argument("--floors", default="both", choices=["both", "start", "end"],
                    help="When the floors are measured (a lean run measures them once).")
    ap.add_argument("--copies-early", action="store_true",
                    help="Measure checkout and pull of version 0 in fresh clones beside train..audit (to save wall time).")
    ap.add_argument("--lean", action=argparse.BooleanOptionalAction, default=None,
                    help="Delete what later commands do not read (default: above 2 GB of weights).")
    a = ap.parse_args()
    params = int(a.params)
    lean = a.lean if a.lean is not None else params * 4 > 2 << 30
    start = os.getloadavg()
    data = {"machine": machine(), **run(params, a.tensors, a.workdir, lean, a.sets, a.floors, a.copies_early),
            "sets": a.sets, "copies_early": a.copies_early}
    data["load_average"] = {"start": start, "end": os.getloadavg()}
    path = write_json(a.out or f"peak_memory_{params:.0e}.json".replace("+", ""), data)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
