"""The demo's `lazy` adversary is a kind, and adversarial demos audit every PR."""

from __future__ import annotations

import pytest

from woolf.demo.adversaries import demo_settings
from woolf.demo.kinds import parse_kinds
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides


@pytest.mark.unit
def test_lazy_is_a_kind_and_adversarial_demos_retrain_every_pr():
    assert parse_kinds("free-rider,overfitter,lazy") == ["free-rider", "overfitter", "lazy"]
    for pretrained in (True, False):
        assert apply_overrides(LedgerConfig(), demo_settings(pretrained)).validators.retrain_rate == 1.0
