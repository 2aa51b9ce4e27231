"""A recipe trained on one device and re-trained on another: the distance re-training must tolerate (issue 34).

Usage:
    from retrain_devices import cross_device
    rows = cross_device("cuda", "cpu", seeds=4, steps=20)      # [{"seed", "steps", "distance", ...}]
    python benchmarks/retrain_devices.py --a cpu --b cpu       # the CPU smoke path (distance 0 expected)

Each row: charlm (the quick demo's size) trained ``steps`` AdamW steps on device ``a`` from a trained model,
and the same recipe (shard, seed, steps, fresh optimizer) on device ``b``; the relative distance
|delta_b - delta_a| / |delta_a| is what woolf/validator/retrain.py compares with validators.retrain_tolerance.
benchmarks/gpu_check.py runs it both ways (cuda -> cpu and cpu -> cuda) when a GPU is lent.
"""

from __future__ import annotations

import argparse
import json

DEMO = {"d_model": 64, "n_layer": 2, "context": 64, "batch_size": 16}


def cross_device(a: str, b: str, seeds: int = 4, steps: int = 20, params: dict | None = None) -> list[dict]:
    import torch

    from woolf.core.merge import compute_delta
    from woolf.protocol.recipe import TOLERANCE
    from woolf.validator.retrain import distance
    from woolf.workloads.charlm import CharLM

    wl = CharLM(**(params or DEMO))
    warm, _ = wl.train(wl.genesis(0), wl.default_data("warm", 0), 40, seed=99)
    rows = []
    for s in range(seeds):
        data = wl.default_data(f"p{s}", 1)
        deltas = []
        for device in (a, b):
            torch.manual_seed(s)
            new, _ = wl.train(warm, data, steps, device=device, seed=s)
            deltas.append(compute_delta(new, warm))
        d = distance(deltas[1], deltas[0])
        rows.append({"seed": s, "steps": steps, "trained_on": a, "retrained_on": b, "distance": d,
                     "within_default_tolerance": d <= TOLERANCE})
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", default="cpu")
    ap.add_argument("--b", default="cpu")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    print(json.dumps(cross_device(args.a, args.b, args.seeds, args.steps), indent=1))
