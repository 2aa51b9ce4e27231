"""Delta arithmetic (woolf/core/merge.py) in reused buffers: bit for bit the same as with fresh ones."""

from __future__ import annotations

import pytest
import torch

from woolf.core.merge import compute_delta
from woolf.core.merge_rules import Rule, merge_step


@pytest.mark.unit
def test_in_place_arithmetic_is_bit_identical():
    g = torch.Generator().manual_seed(1)
    base = {"w": torch.randn(64, 32, generator=g), "h": torch.randn(7, generator=g).to(torch.bfloat16)}
    trained = {k: (v.float() + torch.randn(v.shape, generator=g) * 1e-3).to(v.dtype) for k, v in base.items()}
    plain = compute_delta(trained, base)
    buf = {k: v.clone() for k, v in trained.items()}
    reused = compute_delta(buf, base, into=buf)
    assert reused["w"].data_ptr() == buf["w"].data_ptr()  # float32: the trained tensor's memory
    for k in base:
        assert torch.equal(plain[k].view(torch.uint8), reused[k].view(torch.uint8))
    rule = Rule("attenuated", alpha=0.7)
    want = merge_step(rule, base, None, plain, 0.37).candidate
    got = merge_step(rule, base, None, {k: v.clone() for k, v in plain.items()}, 0.37, reuse_delta=True).candidate
    for k in base:
        assert torch.equal(want[k].view(torch.uint8), got[k].view(torch.uint8))
