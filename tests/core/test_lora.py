"""The LoRA expansion of record (woolf/core/lora.py): exact where it should be, the same bits under any thread count."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import pytest
import torch

from woolf.core.lora import check_pair, expand, rank_of

pytestmark = pytest.mark.unit


def _pair(rows=37, cols=53, r=5, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(r, cols, generator=g).to(dtype) * 0.02,
            torch.randn(rows, r, generator=g).to(dtype) * 0.02)


def test_expand_is_the_documented_float64_sum_rounded_once():
    A, B = _pair()
    scale = 0.75
    d = expand(A, B, scale)
    assert d.dtype == torch.float32 and d.shape == (37, 53)
    # by hand, element by element, with Python floats (IEEE float64): the documented order and roundings
    for i, j in ((0, 0), (5, 17), (36, 52), (20, 3)):
        s = 0.0
        for k in range(A.shape[0]):
            s = s + float(B[i, k]) * float(A[k, j])
        want = torch.tensor(s * float(scale), dtype=torch.float64).to(torch.float32)
        assert d[i, j].item() == want.item()
    # each float32 product is exact in float64
    a, b = float(A[0, 0]), float(B[0, 0])
    assert Fraction(a) * Fraction(b) == Fraction(a * b)


def test_expand_close_to_a_matmul_and_of_rank_r():
    A, B = _pair(rows=64, cols=48, r=4)
    d = expand(A, B, 2.0)
    ref = (B.double() @ A.double() * 2.0).float()
    assert torch.allclose(d, ref, rtol=0, atol=1e-9)
    assert rank_of(d) == 4


def test_blocking_does_not_change_a_bit():
    A, B = _pair(rows=129, cols=31, r=7, seed=3)
    whole = expand(A, B, 1.5)
    for block in (1, 31, 100, 31 * 129 + 1):
        assert torch.equal(expand(A, B, 1.5, block=block).view(torch.int32), whole.view(torch.int32))


def test_bfloat16_factors_are_exact_inputs():
    A, B = _pair(dtype=torch.bfloat16, seed=4)
    assert torch.equal(expand(A, B, 1.0), expand(A.float(), B.float(), 1.0))


_CHILD = """
import sys, hashlib, torch
torch.set_num_threads(int(sys.argv[1]))
from woolf.core.lora import expand
g = torch.Generator().manual_seed(7)
A = torch.randn(16, 300, generator=g) * 0.01
B = torch.randn(260, 16, generator=g) * 0.01
cur = torch.randn(260, 300, generator=g)
d = expand(A, B, 0.5)
s = torch.tensor(0.3, dtype=torch.float32)
cand = (d * s + cur)                      # the attenuated merge's arithmetic
print(torch.get_num_threads(), hashlib.sha256(cand.numpy().tobytes()).hexdigest())
"""


def test_a_lora_merge_recomputed_in_another_process_with_another_thread_count_is_bit_identical():
    outs = []
    for threads in (1, 2, 4):
        got = subprocess.run([sys.executable, "-c", _CHILD, str(threads)], capture_output=True, text=True, check=True)
        n, digest = got.stdout.split()
        assert int(n) == threads
        outs.append(digest)
    assert len(set(outs)) == 1


def test_check_pair_rules_name_the_tensor():
    A, B = _pair(rows=8, cols=6, r=2)
    assert check_pair("w", A, B, 1.0, (8, 6), max_rank=4) == 2
    cases = [
        (dict(A=A.double()), "must be float32 or bfloat16"),
        (dict(B=B.half()), "must be float32 or bfloat16"),
        (dict(shape=(6, 8)), "do not match the target"),
        (dict(B=B[:, :1]), "do not match the target"),
        (dict(shape=(8, 6, 1)), "must be a 2-D tensor"),
        (dict(max_rank=1), "above limits.max_lora_rank 1"),
        (dict(scale=float("nan")), "is not in (0, 1024]"),
        (dict(scale=1e9), "is not in (0, 1024]"),
        (dict(scale=0.0), "is not in (0, 1024]"),
    ]
    for change, msg in cases:
        kw = {"A": A, "B": B, "scale": 1.0, "shape": (8, 6), "max_rank": 4, **change}
        with pytest.raises(ValueError, match=r"^tensor 'w': .*" + msg.replace("(", r"\(").replace(")", r"\)")
                           .replace("[", r"\[").replace("]", r"\]")):
            check_pair("w", kw["A"], kw["B"], kw["scale"], kw["shape"], kw["max_rank"])


def test_a_rank_above_min_rows_cols_is_refused_it_would_be_expanded_for_nothing():
    A, B = _pair(rows=8, cols=6, r=7)  # B·A is 8 x 6: rank 6 at most
    with pytest.raises(ValueError) as err:
        check_pair("w", A, B, 1.0, (8, 6), max_rank=256)
    assert str(err.value) == ("tensor 'w': rank 7 is above min(rows, cols) = 6 of the target [8, 6]: its product "
                              "has no higher rank, the rest is expanded for nothing (send rank 6 at most)")
    A, B = _pair(rows=8, cols=6, r=6)
    assert check_pair("w", A, B, 1.0, (8, 6), max_rank=256) == 6  # full rank: allowed
    A, B = _pair(rows=8, cols=6, r=7)
    assert check_pair("w", A, B, 1.0, (8, 6), max_rank=1 << 30, merged=True) == 7  # history reads as merged


def test_the_expansion_budget_is_counted_from_shapes_and_ranks_and_refused_in_one_line():
    from woolf.core.lora import check_cost, expansion_cost

    llama7b = {f"{i}.{n}": (256, rows, cols) for i in range(32)
               for n, (rows, cols) in {"q": (4096, 4096), "k": (4096, 4096), "v": (4096, 4096), "o": (4096, 4096),
                                       "gate": (11008, 4096), "up": (11008, 4096), "down": (4096, 11008)}.items()}
    assert expansion_cost(llama7b) == 256 * 32 * (4 * 4096 * 4096 + 3 * 11008 * 4096)
    with pytest.raises(ValueError) as err:
        check_cost(llama7b, 2e11)
    assert str(err.value) == ("expanding its 224 targets at rank 256 is 1.7e12 multiply-adds, over "
                              "limits.max_lora_expand 2e11: send a lower rank or fewer targets")
    mixed = {"a": (4, 10, 10), "b": (16, 10, 10)}
    with pytest.raises(ValueError, match=r"^expanding its 2 targets at ranks 4 to 16 is 2000 multiply-adds, over limits.max_lora_expand 1999:"):
        check_cost(mixed, 1999)
    assert check_cost(mixed, 2000) == 2000  # at the budget: allowed


def test_the_most_factor_bytes_within_a_budget_fill_the_cheapest_targets_first():
    from woolf.core.lora import most_factor_bytes

    # (4, 100): 416 bytes per rank for 400 multiply-adds; (20, 20): 160 bytes for 400
    assert most_factor_bytes([(20, 20), (4, 100)], 256, 400 * 3) == 4 * 416 / 4 * 3  # rank 3 of the thin one
    assert most_factor_bytes([(20, 20), (4, 100)], 256, 400 * 6) == 4 * 416 + 2 * 160  # its full rank 4, then 2
    assert most_factor_bytes([(20, 20), (4, 100)], 2, float("inf")) == 2 * 416 + 2 * 160  # max_lora_rank 2


def test_products_compared_in_factor_space_match_the_expansion():
    from woolf.core.lora import product_dot, product_norm2

    A, B = _pair(rows=64, cols=48, r=5, seed=8)
    X = torch.randn(64, 48, generator=torch.Generator().manual_seed(2))
    d = expand(A, B, 0.75).double()
    assert abs(product_dot(X, A, B, 0.75) - float((X.double() * d).sum())) < 1e-9
    assert abs(product_norm2(A, B, 0.75) - float((d * d).sum())) < 1e-9 * float((d * d).sum())


def test_the_expansion_is_the_old_two_pass_loop_bit_for_bit():
    """expand accumulates with one addcmul per k (the exact product, one rounding): the bits of the
    product-then-add loop it replaced, for float32 and bfloat16 factors, subnormal products included."""
    def two_pass(A, B, scale):
        a, b = A.to(torch.float64), B.to(torch.float64)
        acc = torch.zeros((B.shape[0], A.shape[1]), dtype=torch.float64)
        for k in range(A.shape[0]):
            acc.add_(b[:, k:k + 1] * a[k:k + 1, :])
        return (acc * float(scale)).to(torch.float32)

    for dtype, tiny in ((torch.float32, 1.0), (torch.bfloat16, 1.0), (torch.float32, 1e-22)):
        A, B = _pair(rows=70, cols=300, r=9, seed=5, dtype=dtype)
        A = (A.float() * tiny).to(dtype)
        got, want = expand(A, B, 0.3), two_pass(A, B, 0.3)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))
