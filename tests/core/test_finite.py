"""Norm-proven finiteness (woolf/core/finite.py), compared with the long way."""

from __future__ import annotations

import pytest
import torch

from woolf.core.finite import first_nonfinite, scan


@pytest.mark.unit
def test_scan_proves_finite_and_nonzero_and_falls_back_when_the_norm_cannot():
    ok = {"a": torch.randn(100), "n": torch.arange(3)}
    assert scan(ok) == (None, True)
    assert scan({"a": torch.zeros(10), "n": torch.zeros(3, dtype=torch.int64)}) == (None, False)
    assert scan({"a": torch.zeros(10), "n": torch.tensor([0, 1])}) == (None, True)  # an int tensor counts
    assert scan({"a": torch.full((4,), 1e-45)}) == (None, True)  # subnormal squares underflow: any() decides
    assert scan({"a": torch.full((4,), 3e38)}) == (None, True)  # squares overflow, yet every value is finite
    for bad in (float("nan"), float("inf"), float("-inf")):
        t = torch.randn(50)
        t[17] = bad
        assert scan({"a": torch.randn(3), "b": t})[0] == "b"
        assert first_nonfinite({"b": t.to(torch.bfloat16)}) == "b"
    assert first_nonfinite({"e": torch.zeros(0)}) is None
