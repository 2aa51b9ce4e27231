"""Delta arithmetic (woolf/core/merge.py): the merge formula, the delta round trip, and reused buffers bit for
bit the same as fresh ones."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save

from woolf.core.merge import apply_delta, compute_delta
from woolf.core.merge_rules import Rule, merge_step
from woolf.core.scale import delta_scale


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


# The merge formula and the delta round trip.


@pytest.mark.unit
def test_merge_matches_formula_and_is_deterministic():
    g = torch.Generator().manual_seed(1)
    cur = {"a": torch.randn(257, 33, generator=g), "b": torch.randn(7, generator=g).half()}
    delta = {"a": torch.randn(257, 33, generator=g), "b": torch.randn(7, generator=g).half()}
    scale = delta_scale(1.0, 0.5)
    out = apply_delta(cur, delta, scale)
    assert torch.equal(out["a"], cur["a"] + delta["a"] * 0.5)
    assert out["b"].dtype == torch.float16
    assert save(out) == save(apply_delta(cur, delta, scale))  # same bytes every time


@pytest.mark.unit
def test_compute_delta_roundtrip():
    base = {"w": torch.randn(10, 10)}
    trained = {"w": base["w"] + 0.25}
    d = compute_delta(trained, base)
    assert torch.allclose(apply_delta(base, d, 1.0)["w"], trained["w"])
    with pytest.raises(ValueError):
        compute_delta({"x": torch.zeros(1)}, base)
