"""Staleness attenuation (woolf/core/staleness.py)."""

from __future__ import annotations

import pytest

from woolf.core.staleness import attenuation
from woolf.protocol.config import StalenessConfig

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("kind,s,expected", [
    ("inverse", 0, 1.0), ("inverse", 1, 0.5), ("inverse", 3, 0.25),
    ("polynomial", 3, 0.5), ("constant", 9, 1.0),
    ("hinge", 4, 1.0), ("hinge", 5, 1.0 / (0.5 * 1 + 1)),
])
def test_attenuation(kind, s, expected):
    assert attenuation(StalenessConfig(kind=kind, a=0.5, b=4), s) == pytest.approx(expected)


def test_attenuation_rejects_negative_staleness():
    with pytest.raises(ValueError):
        attenuation(StalenessConfig(), -1)
