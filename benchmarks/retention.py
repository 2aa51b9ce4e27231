"""Storage that grows by deltas: bytes in storage before and after `woolf gc`, and a rebuild against a checkout (§9).

Usage:
    python benchmarks/retention.py                                   # 10M parameters, 50 merges
    python benchmarks/retention.py --params 1e8 --versions 10        # 100M: rebuilds of 1 and 9 deltas, 49 extrapolated
    python benchmarks/retention.py --params 2e5 --versions 4 --snapshot-every 2   # the smoke size

A real ledger (workload `synthetic`, unsigned, a bare hub, a local DVC remote)
grows by ``--versions`` merges through the real ``train``/``submit --compress``
and the real validator. Storage is measured with ``survey`` (`woolf storage`)
before and after ``collect`` (`woolf gc`). Then two fresh clones time
``checkout`` of the newest version (stored: a download and a hash check) and of
the version just below it, which gc removed (rebuilt from the snapshot and
every merged delta above it, sha256-checked). To keep disk use to a few
models, the participant's and the validator's old weights are dropped as the
ledger grows (gc after every merge). The 1,000-version storage is computed
from the measured sizes: a compressed delta's size is fixed by the model's
shapes and the setting (woolf/core/compress.py ``parts_bytes``).
Results: benchmarks/results/retention.json.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions, TrainOptions


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def _clone(root: Path, name: str):
    from woolf.ledger.ledger import Ledger

    _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
    _git("config", "user.name", name, cwd=root / name)
    return Ledger.open(root / name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=float, default=1e7)
    ap.add_argument("--versions", type=int, default=50, help="merges to make")
    ap.add_argument("--snapshot-every", type=int, default=50)
    ap.add_argument("--compress", default="topk:0.02,bits:2")
    ap.add_argument("--repeats", type=int, default=3, help="checkouts of each kind, interleaved; the fastest counts")
    ap.add_argument("--out", default="retention.json")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from woolf.core.compress import parse_spec, parts_bytes
    from woolf.ledger.ledger import Ledger
    from woolf.ledger.retention.gc import collect, survey
    from woolf.participant import submit, train
    from woolf.validator import Validator

    n = int(args.params)
    root = Path(tempfile.mkdtemp(prefix="woolf-retention-"))
    try:
        Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="synthetic",
                    overrides={"workload.params.n_params": str(n), "policy.min_improvement": "-1e9",
                               "storage.snapshot_every": str(args.snapshot_every), "workload.steps": "1"}))
        _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
        p, v = _clone(root, "p"), _clone(root, "v")
        sizes, t0, reclaimed = [], time.time(), 0
        for i in range(args.versions):
            train(p, TrainOptions(steps=1, contributor="p", seed=i, device="cpu"))
            sizes.append(submit(p, SubmitOptions(contributor="p", compress=args.compress))["delta_size"])
            [verdict] = Validator(v, device="cpu").run()
            assert verdict.accepted, verdict.reason
            if i == 0:
                first = survey(v)
            reclaimed += collect(v)["bytes"]  # keep the disk to a few models as the ledger grows
            shutil.rmtree(p.root / ".dvc" / "cache" / "files", ignore_errors=True)
            print(f"version {i + 1}: delta {sizes[-1]} B ({time.time() - t0:.0f}s)", flush=True)
        after = survey(v)
        head = after["head"]
        model_bytes = p.pointer(p.head().commit).size if p.pull() else 0
        timings = {}
        checks = [("checkout_stored", head), ("checkout_rebuilt", head - 1)]
        if head - 1 > 1 and args.snapshot_every > head - 1:
            checks.append(("checkout_rebuilt_one", 1))  # one delta: the fixed cost of a rebuild
        for r in range(args.repeats):  # interleaved, each in a fresh clone; the fastest of each counts
            for what, number in checks:
                c = _clone(root, f"c-{what}-{r}")
                prof = cProfile.Profile() if os.environ.get("WOOLF_PROFILE") else None
                t = time.perf_counter()
                if prof:
                    prof.enable()
                c.checkout(number, root / f"{what}.safetensors")
                took = time.perf_counter() - t
                if prof:
                    prof.disable()
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
                timings[what] = min(took, timings.get(what, took))
                timings.setdefault(what + "_all", []).append(took)
                timings[what + "_info"] = c.last_rebuild
                print(what, f"{took:.2f}s", c.last_rebuild, flush=True)
                shutil.rmtree(c.root)
        if "checkout_rebuilt_one" in timings:  # the cost per replayed delta, and 49 of them by extrapolation
            per = (timings["checkout_rebuilt"] - timings["checkout_rebuilt_one"]) / (head - 2)
            timings["per_delta"] = per
            timings["rebuild_49_projected"] = timings["checkout_rebuilt_one"] + 48 * per
        spec = parse_spec(args.compress)
        big = {f"layer{i:03d}.weight": ("F32", (100_000_000 // 8,)) for i in range(8)}
        big_delta, big_model = 8 + 200 + parts_bytes(spec, big), 8 + 400 + 4 * 100_000_000
        k, v_count = 50, 1000  # the setting, whatever this run used
        snapshots = len(range(0, v_count + 1, k)) + (0 if v_count % k == 0 else 1)
        today = (v_count + 1) * big_model + v_count * big_model  # every version's weights + dense deltas
        kept = snapshots * big_model + v_count * big_delta
        data = {"machine": machine(), "settings": vars(args), "model_bytes": model_bytes,
                "delta_bytes": sizes, "ratio": model_bytes / (sum(sizes) / len(sizes)),
                "storage_after_first_merge": first, "storage_final": after, "reclaimed_bytes": reclaimed,
                "timings": timings, "rebuild_over_checkout": timings["checkout_rebuilt"] / timings["checkout_stored"],
                "projection_100M_1000": {"model_bytes": big_model, "delta_bytes": big_delta,
                                         "snapshots": snapshots, "today_bytes": today, "kept_bytes": kept,
                                         "fraction": kept / today}}
        print({k: data[k] for k in ("ratio", "rebuild_over_checkout", "projection_100M_1000", "timings")})
        print(write_json(args.out, data))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
