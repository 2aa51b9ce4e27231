"""Evaluation throughput of the built-in workload: benchmark bytes (tokens) per second.

Usage:
    python benchmarks/eval_throughput.py [--device auto|cpu|cuda] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.workloads.base import resolve_device  # noqa: E402
from woolf.workloads.charlm import CharLM  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="eval_throughput.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    wl = CharLM()
    w = wl.genesis(0)
    bench = wl.benchmark_bytes()
    wl.evaluate(w, bench, device)  # warm-up
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        wl.evaluate(w, bench, device)
        runs.append(time.perf_counter() - t0)
    best = min(runs)
    out = {"machine": machine(), "device": device, "threads": args.threads, "benchmark_bytes": len(bench),
           "seconds": best, "tokens_per_second": len(bench) / best,
           "params": sum(v.numel() for v in w.values())}
    print(f"{device}, {args.threads} thread(s): {len(bench)} tokens in {best:.3f}s = "
          f"{out['tokens_per_second']:,.0f} tokens/s ({out['params']:,} params)")
    write_json(args.out, out)


if __name__ == "__main__":
    main()
