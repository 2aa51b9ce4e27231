"""The merge policy (woolf/core/policy.py): tolerance and strictness."""

from __future__ import annotations

import pytest

from woolf.core.policy import decide
from woolf.protocol.config import PolicyConfig

pytestmark = pytest.mark.unit


def test_policy_tolerance_and_strict():
    tol = PolicyConfig(min_improvement=-0.05)
    assert decide(tol, {"loss": 2.0}, {"loss": 2.03}).accepted
    assert not decide(tol, {"loss": 2.0}, {"loss": 2.1}).accepted
    strict = PolicyConfig(min_improvement=0.01)
    assert not decide(strict, {"loss": 2.0}, {"loss": 1.995}).accepted
    assert decide(PolicyConfig(direction="maximize", metric="acc", min_improvement=0.0),
                  {"acc": 0.5}, {"acc": 0.6}).accepted
    nan = decide(tol, {"loss": 2.0}, {"loss": float("nan")})
    assert not nan.accepted and "not finite" in nan.reason
    assert not decide(tol, {"loss": 2.0}, {"acc": 1.0}).accepted
