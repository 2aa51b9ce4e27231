"""Proof of training (issue 34): how far honest and cheating deltas land from a re-training of their recipe,
what a re-training costs, and what carried optimizer state weighs (benchmarks/RESULTS.md §18).

Usage:
    python benchmarks/retrain_check.py                      # all parts, results/retrain_check.json
    python benchmarks/retrain_check.py --prs 12 --seeds 2   # smaller
    python benchmarks/retrain_check.py --smoke              # seconds: the tests' path

Parts:
- distances: for each seed, |retrained - submitted| / |submitted| (woolf/validator/retrain.py distance) of
  an honest delta re-trained on the same machine (the same threads, and 1 vs 2 threads: another machine's
  reduction order), and of cheats declaring the honest recipe: lazy (half the steps, doubled), free-rider
  (another shard), overfitter (the benchmark), another seed (its own shard in another order), 80% of the steps;
- end to end: ``--prs`` honest PRs through `woolf train`/`submit` (optimizer state carried from the second
  round on, uploaded) and a Validator with validators.retrain_rate = 1: false rejections, distances, and
  re-training seconds against each PR's own training seconds;
- state: bytes of the carried AdamW state against the delta's, raw and gzip-compressed, per model size;
- detection: 1 - (1 - p)^n, the chance that a participant cheating on every PR is caught within n PRs.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions, TrainOptions

SMALL = {"d_model": 32, "n_layer": 1, "context": 32, "batch_size": 8, "benchmark_bytes": 4096, "shard_files": 2}
DEMO = {"d_model": 64, "n_layer": 2, "context": 64, "batch_size": 16}  # charlm's defaults: the quick demo's model


def _distances(params: dict, seeds: int, steps: int) -> list[dict]:
    import torch

    from woolf.core.merge import compute_delta
    from woolf.validator.retrain import distance
    from woolf.workloads.base import TrainData
    from woolf.workloads.charlm import CharLM

    wl = CharLM(**params)
    base = wl.genesis(0)
    warm, _ = wl.train(base, wl.default_data("warm", 0), 40, seed=99)  # not at genesis: a trained model
    bench = wl.benchmark_bytes() if hasattr(wl, "benchmark_bytes") else b""

    def run(data, n, seed, threads=1):
        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        new, _ = wl.train(warm, data, n, seed=seed)
        torch.set_num_threads(1)
        return compute_delta(new, warm)

    rows = []
    for s in range(seeds):
        own = wl.default_data(f"p{s}", 1)
        t0 = time.perf_counter()
        honest = run(own, steps, s)
        secs = time.perf_counter() - t0
        half = run(own, steps // 2, s)
        cases = {
            "honest, same machine": run(own, steps, s),
            "honest, 2 threads vs 1": run(own, steps, s, threads=2),
            "lazy (half the steps, x2)": {k: 2 * v for k, v in half.items()},
            "free-rider (another shard)": run(wl.default_data(f"~other:{s}", 1), steps, s),
            "overfitter (the benchmark)": run(TrainData([bench or b"x" * 4096], "benchmark"), steps, s),
            "another seed (own shard)": run(own, steps, s + 1000),
            "80% of the steps": run(own, int(steps * 0.8), s),
        }
        for case, d in cases.items():  # the validator's arithmetic: submitted = cheat, retrained = honest
            rows.append({"seed": s, "case": case, "distance": distance(honest, d), "train_seconds": round(secs, 4)})
    return rows


def _network(root: Path, overrides: dict):
    from woolf.hub.create import init_hub
    from woolf.ledger.ledger import Ledger

    settings = {**{f"workload.params.{k}": str(v) for k, v in SMALL.items()}, "workload.steps": "20",
                "policy.min_improvement": "-10", "validators.retrain_rate": "1", "scoring.copy_threshold": "0.9999",
                **overrides}
    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), overrides=settings))
    init_hub(root / "hub.git", work.root)
    subprocess.run(["git", "remote", "add", "origin", str(root / "hub.git")], cwd=work.root, check=True)
    return root / "hub.git"


def _clone(root: Path, hub: Path, name: str):
    from woolf.git.repo import clean_env
    from woolf.ledger.ledger import Ledger

    env = clean_env({"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": f"{name}@x", "GIT_COMMITTER_NAME": name,
                     "GIT_COMMITTER_EMAIL": f"{name}@x"})
    subprocess.run(["git", "clone", "-q", str(hub), str(root / name)], check=True, env=env)
    subprocess.run(["git", "config", "user.name", name], cwd=root / name, check=True)
    subprocess.run(["git", "config", "user.email", f"{name}@x"], cwd=root / name, check=True)
    return Ledger.open(root / name)


def _end_to_end(prs: int, steps: int) -> dict:
    from woolf.participant import submit, train
    from woolf.validator import Validator

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hub = _network(root, {})
        people = [_clone(root, hub, f"p{i}") for i in range(4)]
        val = _clone(root, hub, "val")
        v = Validator(val, device="cpu", name="v1")
        for i in range(prs):
            who = people[i % len(people)]
            name = f"p{i % len(people)}"
            trained = train(who, TrainOptions(steps=steps, contributor=name, seed=1000 + i, device="cpu"))
            submit(who, SubmitOptions(contributor=name))
            [verdict] = v.run()
            r = verdict.retrain or {}
            rows.append({"pr": i, "who": name, "state": verdict.state, "reason": verdict.reason[:120],
                         "retrain": r.get("retrain"), "distance": r.get("distance"),
                         "retrain_seconds": r.get("seconds"), "train_seconds": trained["training"]["seconds"],
                         "optimizer": trained["recipe"]["optimizer"]["start"],
                         "validate_seconds": round(sum(verdict.timings.values()), 3) if verdict.timings else None})
    false = [r for r in rows if r["reason"].startswith("retrain:")]
    return {"rows": rows, "prs": len(rows), "false_rejections": len(false),
            "matched": sum(r["retrain"] == "matched" for r in rows)}


def _state_bytes(sizes: list[dict]) -> list[dict]:
    import torch

    from woolf.workloads.charlm import CharLM
    from woolf.workloads.optstate import FILE

    out = []
    for params in sizes:
        wl = CharLM(**params)
        w = wl.genesis(0)
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "opt"
            torch.set_num_threads(1)
            new, _ = wl.train(w, wl.default_data("p", 0), 5, state_dir=state)
            raw = (state / FILE).read_bytes()
            delta_bytes = sum(v.numel() * 4 for v in new.values())
            out.append({"params": params, "parameters": sum(v.numel() for v in new.values()),
                        "delta_bytes": delta_bytes, "state_bytes": len(raw),
                        "state_gzip_bytes": len(gzip.compress(raw, 6)),
                        "delta_gzip_bytes": len(gzip.compress(b"".join(
                            (new[k] - w[k]).numpy().tobytes() for k in sorted(new)), 6))})
    return out


def _detection(cost_ratio: float) -> list[dict]:
    rows = []
    for p in (0.05, 0.10, 0.25):
        rows.append({"rate": p, **{f"n={n}": 1 - (1 - p) ** n for n in (1, 5, 10, 20, 50)},
                     "prs_for_95pct": next(n for n in range(1, 10_000) if 1 - (1 - p) ** n >= 0.95),
                     "validator_compute_per_pr": p * cost_ratio})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--prs", type=int, default=52)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default="retrain_check.json")
    args = ap.parse_args()
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    import torch

    torch.set_num_threads(1)
    if args.smoke:
        args.seeds, args.prs, args.steps = 1, 2, 4
    result: dict = {"machine": machine(), "args": vars(args)}
    result["distances"] = {"small": _distances(SMALL, args.seeds, args.steps)}
    write_json(args.out, result)
    if not args.smoke:
        result["distances"]["demo"] = _distances(DEMO, args.seeds, args.steps)
        write_json(args.out, result)
    result["end_to_end"] = _end_to_end(args.prs, args.steps)
    write_json(args.out, result)
    sizes = [SMALL] if args.smoke else [SMALL, DEMO, {"d_model": 256, "n_layer": 4, "context": 128}]
    result["state"] = _state_bytes(sizes)
    e2e = [r for r in result["end_to_end"]["rows"] if r["retrain_seconds"] and r["train_seconds"]]
    ratio = (sum(r["retrain_seconds"] for r in e2e) / sum(r["train_seconds"] for r in e2e)) if e2e else 1.0
    result["cost_ratio"] = ratio
    result["detection"] = _detection(ratio)
    print(write_json(args.out, result))


if __name__ == "__main__":
    main()
