"""The float32 scalars (woolf/core/scale.py): rounded once."""

from __future__ import annotations

import pytest
import torch

from woolf.core.scale import delta_scale

pytestmark = pytest.mark.unit


def test_delta_scale_is_float32_rounded():
    s = delta_scale(0.7, 1 / 3)
    assert s == torch.tensor(0.7 / 3, dtype=torch.float32).item()
