"""Segments of a run committed on one device and replayed on another: bit for bit, or how far (proof of training).

Usage:
    from retrain_devices import cross_device
    rows = cross_device("cuda", "cpu", seeds=4, steps=20)      # [{"seed", "segment", "exact", "distance", ...}]
    rows = cross_device("cuda", "cuda")                        # CUDA against CUDA: the same class, bit for bit?
    python benchmarks/retrain_devices.py --a cpu --b cpu       # the CPU smoke path (every segment exact)

Each run: charlm (the quick demo's size) trains ``steps`` AdamW steps on device ``a`` from a trained model,
committing to its path (woolf/workloads/proof.py Recorder, a link every ``every`` steps, every state kept);
then each segment is replayed on device ``b`` from the state ``a`` committed at its start. A row says
whether the replay's end digests to the committed link (``exact``: what a validator of the same device
class requires) and, when not, the per-segment distance a validator of another class compares with
validators.retrain_tolerance: |replayed end - committed end| / |committed end - start| over the weights
(woolf/core/chain.py relative_distance). benchmarks/gpu_check.py runs cuda -> cuda, cuda -> cpu and
cpu -> cuda when a GPU is lent; this was written and run on the CPU only (no GPU lent).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

DEMO = {"d_model": 64, "n_layer": 2, "context": 64, "batch_size": 16}


def cross_device(a: str, b: str, seeds: int = 4, steps: int = 20, every: int = 5,
                 params: dict | None = None) -> list[dict]:
    import torch
    from safetensors.torch import load_file

    from woolf.core.chain import relative_distance
    from woolf.protocol.proof import state_digest
    from woolf.protocol.recipe import TOLERANCE
    from woolf.workloads.charlm import CharLM
    from woolf.workloads.proof import Recorder, Replay

    wl = CharLM(**(params or DEMO))
    warm, _ = wl.train(wl.genesis(0), wl.default_data("warm", 0), 40, seed=99)
    rows = []
    for s in range(seeds):
        data = wl.default_data(f"p{s}", 1)
        with tempfile.TemporaryDirectory() as tmp:
            rec = Recorder(every, keep=Path(tmp), keep_bytes=1 << 40)
            torch.manual_seed(s)
            wl.train(warm, data, steps, device=a, seed=s, proof=rec)
            for i in range(len(rec.at) - 1):
                start, end = load_file(Path(tmp) / rec.kept[i]), load_file(Path(tmp) / rec.kept[i + 1])
                rep = Replay(dict(start), rec.at[i], rec.at[i + 1], keep_end=True)
                wl.train(warm, data, steps, device=b, seed=s, proof=rep)
                keys = [k for k in end if k.startswith("params/")]
                exact = state_digest(rep.end) == rec.links[i + 1][0]
                d = 0.0 if exact else relative_distance({k: rep.end_state[k] for k in keys}, {k: end[k] for k in keys},
                                                        {k: start[k] for k in keys})
                rows.append({"seed": s, "segment": i, "steps": rec.at[i + 1] - rec.at[i], "trained_on": a,
                             "replayed_on": b, "exact": exact,
                             "fingerprints_equal": rep.fingerprints == rec.segment_fingerprints(i + 1),
                             "distance": d, "within_default_tolerance": d <= TOLERANCE})
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", default="cpu")
    ap.add_argument("--b", default="cpu")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    print(json.dumps(cross_device(args.a, args.b, args.seeds, args.steps), indent=1))
