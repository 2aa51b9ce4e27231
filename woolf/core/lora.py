"""Low-rank (LoRA) deltas: the exact, portable expansion of a factor pair into a dense float32 update.

Usage:
    d = expand(A, B, scale)          # float32 (rows, cols): round_f32(round_f64(S) * f64(scale))
    check_pair("h.0.attn.c_attn.weight", A, B, scale, (rows, cols), max_rank=64)   # ValueError naming the rule
    check_cost({target: (r, rows, cols)}, budget=5e11)   # ValueError when expanding them all is over the budget
    product_dot(X, A, B, scale); product_norm2(A, B, scale)   # <X, scale·B·A>, |scale·B·A|^2: B·A never formed
    rank_of(d)                       # numerical rank (tests and benchmarks)

A pair is A: (r, cols) and B: (rows, r) for a target tensor W of shape (rows, cols), and the
update is scale * B·A (W's own shape: for nn.Linear, rows = out and cols = in; a layer that
stores W transposed, as GPT-2's Conv1D does, sends its factors transposed so that B·A has W's
shape). The arithmetic of record, element by element (i, j):

    S[i, j] = (...((0 + b[i,0]*a[0,j]) + b[i,1]*a[1,j]) + ...) + b[i,r-1]*a[r-1,j]   in float64
    D[i, j] = round_to_float32( S[i, j] * float64(scale) )                        (float64 multiply)

Why the bits are the same on every machine and thread count:
- a, b and scale are float32 or bfloat16 values (the only factor dtypes accepted), so each is
  exactly a float64; a product of two of them has at most 24 + 24 = 48 significant bits and is
  exact in float64 (53 bits): no rounding at all, whether or not the CPU fuses the multiply
  into an add (an FMA of an exact product rounds the same as the add alone);
- the r sums run in the fixed order k = 0 .. r-1, each one IEEE float64 addition (one rounding,
  round-to-nearest-even), element-wise: there is no reduction across elements whose order a
  BLAS library, a thread count or an instruction set could choose;
- then one float64 multiply by the scale (one rounding) and one conversion to float32 (one
  rounding). Every step is a correctly rounded IEEE-754 operation on fixed inputs in a fixed
  order, so the result is a function of the bytes alone.
Rows are processed in blocks (``block`` elements: an accumulator that stays in cache) to bound
memory; the blocking does not change any element's operations. Denormals:
torch keeps them (``torch.set_flush_denormal`` is off unless someone turns it on; ``expand``
refuses to run when it is on, where it would change the bits).
"""

from __future__ import annotations

import math

import torch

FACTOR_DTYPES = (torch.float32, torch.bfloat16)  # exact in float64, with exact products
MAX_SCALE = 1024.0  # alpha/r above this is not a LoRA scale anyone trains with: refused as absurd
BLOCK = 1 << 17  # float64 elements per block of rows: a 1 MiB accumulator stays in a core's cache


def _flush_denormal_on() -> bool:
    tiny = torch.tensor([1e-40], dtype=torch.float32)  # a float32 subnormal
    return bool((tiny * 1.0)[0] == 0)


def expand(A: torch.Tensor, B: torch.Tensor, scale: float, block: int = BLOCK) -> torch.Tensor:
    """The float32 update scale·B·A by the arithmetic of record (module docstring)."""
    r, cols = A.shape
    rows = B.shape[0]
    if _flush_denormal_on():
        raise RuntimeError("torch.set_flush_denormal(True) is on: the LoRA expansion needs IEEE denormals")
    a = A.detach().to("cpu", torch.float64).contiguous()
    b = B.detach().to("cpu", torch.float64).contiguous()
    s = torch.tensor(float(scale), dtype=torch.float64)
    out = torch.empty((rows, cols), dtype=torch.float32)
    step = max(1, block // max(1, cols))
    for lo in range(0, rows, step):
        hi = min(rows, lo + step)
        acc = torch.zeros((hi - lo, cols), dtype=torch.float64)
        for k in range(r):  # fixed order; each product exact, each add one rounding (fused or not: the same)
            acc.addcmul_(b[lo:hi, k:k + 1], a[k:k + 1, :])
        acc.mul_(s)
        out[lo:hi] = acc.to(torch.float32)
    return out


def check_pair(name: str, A, B, scale: float | None, shape: tuple, max_rank: int, merged: bool = False) -> int:
    """The pair's rank after every rule holds; ValueError with a one-line reason naming ``name`` otherwise.

    ``A``/``B`` may be tensors or (dtype, shape) descriptions (torch dtype, tuple): checks run on the
    header before any data is read; ``scale`` None skips the scale's check. A rank above min(rows, cols)
    is refused: the product's rank is min(rows, cols) at most, and each rank above it is expanded for
    nothing. ``merged``: a delta its ledger merged already, read back as it was merged (the audit,
    rebuilds), which an older version may have let through with such a rank.
    """
    a_dtype, a_shape = (A.dtype, tuple(A.shape)) if isinstance(A, torch.Tensor) else A
    b_dtype, b_shape = (B.dtype, tuple(B.shape)) if isinstance(B, torch.Tensor) else B
    for part, dt in (("A", a_dtype), ("B", b_dtype)):
        if dt not in FACTOR_DTYPES:
            raise ValueError(f"tensor {name!r}: factor {part} is {str(dt).replace('torch.', '')}; "
                             "LoRA factors must be float32 or bfloat16")
    if len(shape) != 2:
        raise ValueError(f"tensor {name!r}: a LoRA target must be a 2-D tensor, it is {len(shape)}-D {list(shape)}")
    rows, cols = shape
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"tensor {name!r}: factors A {list(a_shape)} and B {list(b_shape)} must be 2-D")
    r = a_shape[0]
    if b_shape[1] != r or a_shape[1] != cols or b_shape[0] != rows:
        raise ValueError(f"tensor {name!r}: factors A {list(a_shape)} and B {list(b_shape)} do not match the "
                         f"target {list(shape)} (need A: r x {cols}, B: {rows} x r)")
    if r < 1:
        raise ValueError(f"tensor {name!r}: rank 0 (an empty factor pair)")
    if r > max_rank:
        raise ValueError(f"tensor {name!r}: rank {r} is above limits.max_lora_rank {max_rank}")
    if r > min(rows, cols) and not merged:
        raise ValueError(f"tensor {name!r}: rank {r} is above min(rows, cols) = {min(rows, cols)} of the target "
                         f"{list(shape)}: its product has no higher rank, the rest is expanded for nothing "
                         f"(send rank {min(rows, cols)} at most)")
    if scale is not None:
        check_scale(name, scale)
    return r


def expansion_cost(targets: dict) -> int:
    """Multiply-adds of expanding every target once: the sum of r·rows·cols over {target: (r, rows, cols)}.
    What a validator's CPU spends on a lora delta (``expand``), and at least the number of float32 values the
    expansion writes (r >= 1): the unit of ``limits.max_lora_expand``."""
    return sum(r * rows * cols for r, rows, cols in targets.values())


def check_cost(targets: dict, budget: float) -> int:
    """``expansion_cost(targets)``; ValueError (one line) when it is over ``budget`` (limits.max_lora_expand).
    Made from the header alone (shapes and ranks), before any factor is read."""
    cost = expansion_cost(targets)
    if cost > budget:
        ranks = sorted({r for r, _, _ in targets.values()})
        at = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]} to {ranks[-1]}"
        n = len(targets)
        digits = next(d for d in (2, 4, 17) if d == 17 or short(cost, d) != short(budget, d))
        raise ValueError(f"expanding its {n} target{'' if n == 1 else 's'} at {at} is {short(cost, digits)} "
                         f"multiply-adds, over limits.max_lora_expand {short(budget, digits)}: send a lower rank "
                         "or fewer targets")
    return cost


def short(x: float, digits: int = 2) -> str:
    """1.7e12, 5e11, 96: ``digits`` significant digits, an exponent without '+' or leading zeros."""
    if x < 10 ** digits and x == int(x):
        return str(int(x))
    mantissa, _, exp = f"{x:.{digits}g}".partition("e")
    return f"{mantissa}e{int(exp)}" if exp else mantissa


def most_factor_bytes(shapes, max_rank: int, budget: float) -> float:
    """At most how many bytes of factors a lora file can hold for targets of ``shapes`` [(rows, cols)], each
    at most once, with ranks within ``max_rank`` and min(rows, cols) and an expansion within ``budget``
    multiply-adds. An upper bound (fractional ranks; float32 factors: 4·r·(rows + cols) bytes for
    r·rows·cols multiply-adds), the targets with the most bytes per multiply-add filled first."""
    left, total = float(budget), 0.0
    for rows, cols in sorted(shapes, key=lambda s: s[0] * s[1] / max(1, s[0] + s[1])):
        cap = min(max_rank, rows, cols)
        if cap <= 0:
            continue
        r = min(cap, left / (rows * cols))
        total += 4 * r * (rows + cols)
        left -= r * rows * cols
        if left <= 0:
            break
    return total


def product_dot(X: torch.Tensor, A: torch.Tensor, B: torch.Tensor, scale: float) -> float:
    """<X, scale·B·A> (the sum of the element-wise product) in float64 without forming B·A:
    scale · sum((Bᵀ·X) ∘ A), r·rows·cols multiply-adds in BLAS, not the expansion's exact sums."""
    x = X.detach().to("cpu", torch.float64).reshape(B.shape[0], A.shape[1])
    a, b = A.detach().to("cpu", torch.float64), B.detach().to("cpu", torch.float64)
    return float(scale) * float(((b.T @ x) * a).sum())


def product_norm2(A: torch.Tensor, B: torch.Tensor, scale: float) -> float:
    """|scale·B·A|² in float64 from r x r products alone: scale² · sum((BᵀB) ∘ (A·Aᵀ))."""
    a, b = A.detach().to("cpu", torch.float64), B.detach().to("cpu", torch.float64)
    return max(0.0, float(scale) ** 2 * float(((b.T @ b) * (a @ a.T)).sum()))


def check_scale(name: str, scale: float) -> None:
    if not math.isfinite(scale) or not 0 < scale <= MAX_SCALE:
        raise ValueError(f"tensor {name!r}: LoRA scale {scale!r} is not in (0, {MAX_SCALE:g}] (alpha/r)")


def rank_of(t: torch.Tensor, rtol: float = 1e-5) -> int:
    """Numerical rank of a 2-D tensor (singular values above ``rtol`` x the largest), in float64."""
    s = torch.linalg.svdvals(t.to(torch.float64))
    if s.numel() == 0 or float(s[0]) == 0:
        return 0
    return int((s > rtol * s[0]).sum())
