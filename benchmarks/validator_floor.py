"""The validator's own work per PR against the floor of one version's bytes (issue 35, item 1).

Usage:
    python benchmarks/validator_floor.py                     # 250M synthetic parameters (1 GB), 3 PRs
    python benchmarks/validator_floor.py --params 1e6 --prs 2   # the smoke size

A synthetic ledger (benchmarks measure the ledger, not a model: its training and evaluation
are one pass over the weights; scoring off, its evaluations are not the validator's own work;
a step size so small that each delta is its own noise, so no PR is a copy of another),
``--prs`` participants each train one step and submit; then
one validator pass (``Validator(...).run()``, one process, as `woolf validate --all`) merges
them all. Per PR, the validator's own work is what its verdict's timings record less
evaluation and scoring (fetch, load, checks, merge, verify: waiting for the delta's storage hashes, upload,
push; "with_evaluation": all of them, the PR's wall time in the pass). The floor is ``cp`` then
``md5sum`` of version 0's object in storage, measured in this run before and after the pass
(the better sample is used: the machine is shared). Target: median own work <= 2x the floor.
Then md5 + sha256 of that object in one stream (as woolf hashes) against 8 pieces hashed at
once: what keeping a version as one DVC object per shard would gain (docs/protocol.md).
Results go to benchmarks/results/validator_floor_<params>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import floor, machine, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions, TrainOptions

NOT_OWN = ("evaluation", "scoring", "retrain")  # every other timing is own work (as gpu_check counts it)


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def hashing(obj: Path, shards: int) -> dict:
    """md5 + sha256 of one version's object: in one stream (woolf's Digests, two helper threads), and as
    ``shards`` pieces hashed at once (what one DVC object per shard would allow), each from the page cache."""
    from concurrent.futures import ThreadPoolExecutor

    from woolf.storage.files import hashes_of_file

    size = obj.stat().st_size
    hashes_of_file(obj)  # the file in the page cache for both
    t0 = time.perf_counter()
    hashes_of_file(obj)
    one = time.perf_counter() - t0

    def piece(i: int) -> tuple[str, str]:
        md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
        start, end = size * i // shards, size * (i + 1) // shards
        with open(obj, "rb") as fh:
            fh.seek(start)
            left = end - start
            while left > 0:
                block = fh.read(min(8 << 20, left))
                md5.update(block)
                sha.update(block)
                left -= len(block)
        return md5.hexdigest(), sha.hexdigest()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(shards) as pool:
        list(pool.map(piece, range(shards)))
    many = time.perf_counter() - t0
    return {"bytes": size, "one_stream": round(one, 3), f"{shards}_shards_parallel": round(many, 3),
            "speedup": round(one / many, 2), "cores": os.cpu_count()}


def run(root: Path, params: int, tensors: int, prs: int, shards: int = 8) -> dict:
    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit, train
    from woolf.validator import Validator

    model_bytes = params // tensors * tensors * 4
    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="synthetic",
                       overrides={"workload.params.n_params": str(params), "workload.params.n_tensors": str(tensors),
                                  "policy.min_improvement": "-1e9", "scoring.enabled": "false",
                                  # noise dominates each delta: PRs are not copies of each other
                                  "workload.params.step_size": "1e-8",
                                  "limits.max_delta_bytes": str(max(2 << 30, 2 * model_bytes))}))
    _git("clone", "-q", "--bare", str(work.root), str(root / "hub.git"), cwd=root)
    obj = max((p for p in (root / "storage").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    floors = [floor(obj, root / "floor.tmp")]
    for i in range(prs):
        who = f"p{i}"
        _git("clone", "-q", str(root / "hub.git"), str(root / who), cwd=root)
        _git("config", "user.name", who, cwd=root / who)
        led = Ledger.open(root / who)
        train(led, TrainOptions(steps=1, contributor=who, device="cpu", seed=i))
        submit(led, SubmitOptions(contributor=who))
    _git("clone", "-q", str(root / "hub.git"), str(root / "val"), cwd=root)
    _git("config", "user.name", "val", cwd=root / "val")
    t0 = time.perf_counter()
    verdicts = Validator(Ledger.open(root / "val"), device="cpu").run()
    pass_s = time.perf_counter() - t0
    floors.append(floor(obj, root / "floor.tmp"))
    hashed = hashing(obj, shards)
    print(f"md5 + sha256 of the object: one stream {hashed['one_stream']:.2f} s, {shards} shards at once "
          f"{hashed[f'{shards}_shards_parallel']:.2f} s ({hashed['speedup']:.2f}x, {os.cpu_count()} cores)", flush=True)
    best = min(f["seconds"] for f in floors)
    rows = []
    for v in verdicts:
        t = dict(v.timings or {})
        own = sum(x for k, x in t.items() if k not in NOT_OWN)
        rows.append({"id": v.id, "state": v.state, "reason": v.reason, "timings": t, "own_work": round(own, 3),
                     "over_floor": round(own / best, 2), "with_evaluation": round(sum(t.values()), 3)})
        print(f"{v.id[-12:]}: {v.state} ({v.reason[:80]}), own work {own:.2f} s = {own / best:.2f}x floor; {t}", flush=True)
    median = statistics.median(r["own_work"] for r in rows)
    print(f"median own work {median:.2f} s; floor (cp + md5sum) {best:.2f} s: {median / best:.2f}x "
          f"(target <= 2x); the pass took {pass_s:.1f} s", flush=True)
    return {"params": params, "tensors": tensors, "model_bytes": model_bytes, "prs": prs, "floors": floors,
            "floor_seconds": best, "hashing": hashed, "per_pr": rows, "own_work_median": median,
            "median_over_floor": round(median / best, 2), "pass_seconds": round(pass_s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=250e6)
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--prs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    params = int(a.params)
    start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="woolf-vfloor-", dir=a.workdir) as tmp:
        data = {"machine": machine(), **run(Path(tmp), params, a.tensors, a.prs)}
    data["load_average"] = {"start": start, "end": os.getloadavg()}
    print(f"wrote {write_json(a.out or f'validator_floor_{params:.0e}.json'.replace('+', ''), data)}")


if __name__ == "__main__":
    main()
