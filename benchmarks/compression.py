"""Compressed deltas at equal compute: bytes per PR and final loss, dense against top-k settings (§9).

Usage:
    python benchmarks/compression.py                       # the study (a few minutes per seed on 2 cores)
    python benchmarks/compression.py --smoke               # seconds: the test suite's run
    python benchmarks/compression.py --settings dense,topk:0.02,bits:2 --seeds 2

An in-process simulation built from the functions the ledger runs: N workers
each train K steps from the current version (the workload's ``train`` with a
persistent optimizer state, as ``woolf train`` keeps it), then each worker's
delta is compressed exactly as ``woolf submit --compress`` does
(``woolf/core/compress.py``: chunked top-k, b-bit values, the worker's own
residual carried into its next delta when error feedback is on) and expanded
as the validator expands it; the version moves by the mean of the expanded
deltas times ``--outer-lr`` (synchronous rounds: every worker's PR merged at
staleness 0; 1 is plain averaging). Every setting runs the same steps on the same data, so final
losses compare at equal compute. Bytes per PR are the sizes of the files
submit writes (safetensors with the parts). Results: benchmarks/results/compression.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402
from convergence import make_world, model, sub  # noqa: E402

from woolf.core.compress import compress, expand, parse_spec  # noqa: E402

SETTINGS = ["dense", "topk:0.02,bits:2", "topk:0.02,bits:2,ef:0", "topk:0.01,bits:2", "topk:0.05,bits:2",
            "topk:0.02,bits:4", "topk:0.02,bits:8", "topk:0.01,bits:2,ef:0"]


def parse(setting: str):
    ef = not setting.endswith(",ef:0")
    return parse_spec(setting.removesuffix(",ef:0")), ef


def run(world, setting: str, n: int, rounds: int, k: int, seed: int, outer_lr: float = 1.0) -> dict:
    spec, ef = parse(setting)
    cur = world.genesis
    mspec = {name: ("F32", tuple(t.shape)) for name, t in cur.items()}
    resid: dict[int, dict] = {}
    sizes, curve = [], [world.loss(cur)]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            expanded = []
            for w in range(n):
                trained, _ = world.wl.train(cur, world.data(w, r), k, seed=seed * 1000 + r * n + w,
                                            state_dir=Path(tmp) / f"w{w}")
                delta = sub(trained, cur)
                if spec is None:
                    sizes.append(len(save(delta)))
                    expanded.append(delta)
                    continue
                total = {kk: v + resid[w][kk] for kk, v in delta.items()} if w in resid else delta
                parts = compress(total, spec)
                sizes.append(len(save(parts)))
                sent = expand(parts, spec, mspec)
                if ef:
                    resid[w] = {kk: total[kk] - sent[kk] for kk in total}
                expanded.append(sent)
            cur = {kk: cur[kk] + outer_lr * (sum(d[kk] for d in expanded) / n) for kk in cur}
            curve.append(world.loss(cur))
    return {"final_loss": curve[-1], "curve": curve, "bytes_per_pr": statistics.mean(sizes)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--settings", default=";".join(SETTINGS), help="';'-separated; ',ef:0' = no error feedback")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--k", type=int, default=20, help="steps per contribution")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--outer-lr", type=float, default=1.0, help="the version moves by this times the mean delta")
    ap.add_argument("--regime", default="scratch-iid")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default="compression.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.smoke:
        args.settings, args.workers, args.rounds, args.k, args.seeds = "dense;topk:0.05,bits:2", 2, 2, 3, 1
    wl = model("small")
    world = make_world(wl, wl.benchmark_bytes(), args.regime, args.workers, 800)
    dense_bytes = len(save(world.genesis))
    rows, t0 = [], time.time()
    for setting in args.settings.split(";"):
        runs = [run(world, setting, args.workers, args.rounds, args.k, s, args.outer_lr) for s in range(args.seeds)]
        finals = [r["final_loss"] for r in runs]
        row = {"setting": setting, "finals": finals, "final_mean": statistics.mean(finals),
               "final_std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
               "bytes_per_pr": runs[0]["bytes_per_pr"], "ratio": dense_bytes / runs[0]["bytes_per_pr"],
               "curves": [r["curve"] for r in runs]}
        rows.append(row)
        print(f"{setting:<24} loss {row['final_mean']:.4f} ± {row['final_std']:.4f}  "
              f"{row['bytes_per_pr']:>9.0f} B/PR ({row['ratio']:.0f}x)  ({time.time() - t0:.0f}s)", flush=True)
    dense = next((r for r in rows if r["setting"] == "dense"), None)
    if dense:
        for r in rows:
            r["loss_vs_dense"] = r["final_mean"] / dense["final_mean"] - 1
    print(write_json(args.out, {"machine": machine(), "settings": vars(args), "dense_bytes": dense_bytes,
                                "genesis_loss": world.loss(world.genesis), "rows": rows}))


if __name__ == "__main__":
    main()
