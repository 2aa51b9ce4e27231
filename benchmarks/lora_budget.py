"""What `limits.max_lora_expand` costs an honest PR: the expansion's seconds per multiply-add, per model shape.

Usage:
    python benchmarks/lora_budget.py                          # 4096 x 4096 at rank 256, once each way
    python benchmarks/lora_budget.py --rows 1024 --cols 1024 --rank 64 --out lora_budget_small.json
    python benchmarks/lora_budget.py --no-old                 # skip the previous loop (13 s of CPU at the default)

Measures, on one thread, CPU seconds (``time.process_time``: a loaded machine's other jobs do not count):
- ``expand`` (woolf/core/lora.py, the arithmetic of record) on one rows x cols target at ``--rank``, and
  the loop it replaced (a float64 product into a temporary, then an add, over 32 MiB blocks): the same
  bits, checked here;
- the copy check's exact comparison with another PR's lora target: the cosine's three sums in factor
  space (core/lora.py product_dot and product_norm2, what core/scores.py similarity does now) against
  the expansion each comparison used to make;
then, from the seconds per multiply-add, what expanding a whole PR costs at the shapes people train:
SmolLM2-135M, Llama-3.2-1B (1.2B) and Llama-2-7B, every linear layer of the blocks targeted, at
ranks 8, 16, 64 and 256, against the default budget (and the disk its expansion takes: float32 targets).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.core.lora import expand, expansion_cost, product_dot, product_norm2  # noqa: E402
from woolf.protocol.config import LimitsConfig  # noqa: E402

# (hidden, MLP width, layers, key/value width): q, k, v, o, gate, up, down per block, as nn.Linear (out x in)
SHAPES = {"SmolLM2-135M": (576, 1536, 30, 192), "Llama-3.2-1B": (2048, 8192, 16, 512),
          "Llama-2-7B": (4096, 11008, 32, 4096)}
RANKS = (8, 16, 64, 256)


def targets(hidden: int, mlp: int, layers: int, kv: int) -> list[tuple[int, int]]:
    block = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (mlp, hidden), (mlp, hidden),
             (hidden, mlp)]
    return block * layers


def two_pass(A, B, scale, block=1 << 22):
    """The loop ``expand`` used before: each product into a temporary, then added (32 MiB blocks)."""
    r, cols = A.shape
    a, b = A.to(torch.float64), B.to(torch.float64)
    out = torch.empty((B.shape[0], cols), dtype=torch.float32)
    step = max(1, block // cols)
    for lo in range(0, B.shape[0], step):
        hi = min(B.shape[0], lo + step)
        acc = torch.zeros((hi - lo, cols), dtype=torch.float64)
        tmp = torch.empty_like(acc)
        for k in range(r):
            torch.mul(b[lo:hi, k:k + 1], a[k:k + 1, :], out=tmp)
            acc.add_(tmp)
        acc.mul_(torch.tensor(float(scale), dtype=torch.float64))
        out[lo:hi] = acc.to(torch.float32)
    return out


def cpu(fn, *args):
    t0 = time.process_time()
    out = fn(*args)
    return time.process_time() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rank", type=int, default=256)
    ap.add_argument("--no-old", action="store_true", help="do not time the previous loop")
    ap.add_argument("--out", default="lora_budget.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    A = 0.02 * torch.randn(a.rank, a.cols, generator=g)
    B = 0.02 * torch.randn(a.rows, a.rank, generator=g)
    X = torch.randn(a.rows, a.cols, generator=g)
    work = a.rank * a.rows * a.cols
    secs, new = cpu(expand, A, B, 0.5)
    one = {"rows": a.rows, "cols": a.cols, "rank": a.rank, "multiply_adds": work, "expand_s": round(secs, 3),
           "ns_per_multiply_add": round(secs / work * 1e9, 3)}
    if not a.no_old:
        old_s, old = cpu(two_pass, A, B, 0.5)
        one.update(old_s=round(old_s, 3), old_ns_per_multiply_add=round(old_s / work * 1e9, 3),
                   same_bits=bool(torch.equal(old.view(torch.int32), new.view(torch.int32))))
    cmp_s, _ = cpu(lambda: (product_dot(X, A, B, 0.5), product_norm2(A, B, 0.5), float((X * X).sum())))
    one["compare_in_factor_space_s"] = round(cmp_s, 3)
    rate = secs / work
    budget = LimitsConfig().max_lora_expand
    models = {}
    for name, dims in SHAPES.items():
        shapes = targets(*dims)
        rows = {}
        for r in RANKS:
            if r > min(min(s) for s in shapes):
                rows[str(r)] = "refused: above min(rows, cols) of a target"
                continue
            cost = expansion_cost({i: (r, *s) for i, s in enumerate(shapes)})
            rows[str(r)] = {"multiply_adds": cost, "seconds": round(cost * rate, 1), "within_default": cost <= budget}
        dense = sum(m * n for m, n in shapes)
        models[name] = {"targets": len(shapes), "targeted_parameters": dense, "expanded_gib": round(4 * dense / 2**30, 2),
                        "ranks": rows, "rank_at_budget": int(budget // dense)}
    data = {"machine": machine(), "threads": 1, "default_budget": budget, "seconds_at_budget": round(budget * rate, 1),
            "one_target": one, "models": models}
    print(f"expand {a.rows} x {a.cols} r={a.rank}: {secs:.2f} s CPU, {one['ns_per_multiply_add']} ns per multiply-add"
          + (f" (before: {one['old_s']:.2f} s, same bits: {one['same_bits']})" if not a.no_old else "")
          + f"; compared in factor space: {cmp_s:.3f} s")
    print(f"default budget {budget:g} multiply-adds: {budget * rate:.0f} s here")
    for name, m in models.items():
        cells = ", ".join(f"r={r}: {v['seconds']} s{'' if v['within_default'] else ' (over)'}" if isinstance(v, dict)
                          else f"r={r}: refused" for r, v in m["ranks"].items())
        print(f"{name} ({m['targets']} targets, {m['expanded_gib']} GiB expanded): {cells}; "
              f"highest rank within the budget {m['rank_at_budget']}")
    write_json(a.out, data)


if __name__ == "__main__":
    main()
