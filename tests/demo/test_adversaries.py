"""The adversarial demo's settings (woolf/demo/adversaries.py)."""

from __future__ import annotations

import pytest

from woolf.demo.adversaries import demo_settings
from woolf.demo.kinds import parse_kinds
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides


@pytest.mark.unit
def test_the_adversarial_demo_refuses_not_unique_deltas_only_when_continuing_a_pretrained_model():
    from woolf.demo.adversaries import demo_settings
    from woolf.protocol.config import LedgerConfig
    from woolf.protocol.config_text import apply_overrides

    cont, scratch = demo_settings(True), demo_settings(False)
    assert apply_overrides(LedgerConfig(), cont).scoring.uniqueness == "reject"
    assert apply_overrides(LedgerConfig(), scratch).scoring.uniqueness == "mark"  # from scratch honest work is often marked
    assert cont["scoring.min_assigned"] == scratch["scoring.min_assigned"] == "0.01"


# The demo's `lazy` adversary (caught by the audit: tests/demo/test_forgery.py) and its audit settings.
@pytest.mark.unit
def test_lazy_is_a_kind_and_adversarial_demos_retrain_every_pr():
    assert parse_kinds("free-rider,overfitter,lazy") == ["free-rider", "overfitter", "lazy"]
    for pretrained in (True, False):
        assert apply_overrides(LedgerConfig(), demo_settings(pretrained)).validators.retrain_rate == 1.0
