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
