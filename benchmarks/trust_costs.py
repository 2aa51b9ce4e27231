"""What issue 37's defences cost per PR (CPU; no GPU needed): sketching a delta for the copy index,
comparing one PR's sketch with N earlier ones, the dense size bound, the norm guard's bound and the
drawdown's best version on a small real ledger.

Usage:
    python benchmarks/trust_costs.py                       # 1M and 10M parameters, 1,000 and 5,000 open PRs
    python benchmarks/trust_costs.py --params 1e5 --open 100 --merges 3    # a smoke run
Prints one JSON object; results in benchmarks/RESULTS.md §15.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


SEED = b"k" * 32


def _model(params: int, tensors: int = 20) -> dict:
    per = max(1, params // tensors)
    g = torch.Generator().manual_seed(0)
    return {f"t{i}": torch.randn(per, generator=g) * 0.01 for i in range(tensors)}


def _timed(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sketch_costs(params_list, open_list) -> dict:
    from woolf.core.sketch import sketch
    from woolf.validator.copyindex import CopyIndex

    out = {}
    for params in params_list:
        delta = _model(int(params))
        s = sketch(delta, SEED)
        row = {"sketch_s": round(_timed(lambda d=delta: sketch(d, SEED)), 4),
               "sketch_bytes": sum(t.numel() * t.element_size() for t in s.values())}
        for n in open_list:
            index = CopyIndex(SEED)
            me = index.add("me", delta)
            entries = [(i, index.entry(f"o{i}", lambda: _model(2000, 20))) for i in range(min(n, 50))]
            entries = [entries[i % len(entries)] for i in range(n)]  # n comparisons (entries reused)
            row[f"compare_{n}_s"] = round(_timed(lambda e=entries, m=me, ix=index: ix.candidates(m, e, 0.97)), 4)
        out[str(int(params))] = row
    return out


def ledger_costs(merges: int) -> dict:
    from tests.conftest import make_network
    from tests.crafting import craft_pr, random_delta
    from woolf.storage.weights import spec_of
    from woolf.validator import Validator, drawdown, standing
    from woolf.validator.intake import declared_bound
    from woolf.validator.state import ValidatorState

    root = Path(tempfile.mkdtemp(prefix="woolf-trust-"))
    net = make_network(root, **{"policy.min_improvement": "-10"})
    val = net.clone("val")
    for i in range(merges):
        craft_pr(val, tensors=random_delta(val, scale=0.001, seed=i), who=f"p{i}")
        Validator(val, device="cpu").run()
    val.fetch()
    main = val.head("refs/remotes/origin/main")
    ctx = Validator(val, device="cpu").ctx  # what it reads once per main head lives in its state

    def cold_standing():
        ctx.state = ValidatorState()
        standing.standing_norms(ctx, main)

    def cold_best():
        ctx.state = ValidatorState()
        drawdown.trusted_best(ctx, main)

    spec = spec_of(val.load_weights(main))
    return {"merges": merges,
            "standing_cold_s": round(_timed(cold_standing), 4),
            "standing_warm_s": round(_timed(lambda: standing.standing_norms(ctx, main)), 6),
            "drawdown_cold_s": round(_timed(cold_best), 4),
            "drawdown_warm_s": round(_timed(lambda: drawdown.trusted_best(ctx, main)), 6),
            "dense_bound_s": round(_timed(lambda: declared_bound({"kind": "dense", "size": 1}, spec,
                                                                  val.config.limits), 10), 6)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--open", nargs="+", type=int, default=[1000, 5000])
    ap.add_argument("--merges", type=int, default=8)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(json.dumps({"sketch": sketch_costs(args.params, args.open), "ledger": ledger_costs(args.merges)},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
