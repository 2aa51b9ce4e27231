"""The adversarial demo's settings (woolf/demo/adversaries.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_the_adversarial_demo_refuses_not_unique_deltas_only_when_continuing_a_pretrained_model():
    from woolf.demo.adversaries import demo_settings
    from woolf.protocol.config import LedgerConfig
    from woolf.protocol.config_text import apply_overrides

    cont, scratch = demo_settings(True), demo_settings(False)
    assert apply_overrides(LedgerConfig(), cont).scoring.uniqueness == "reject"
    assert apply_overrides(LedgerConfig(), scratch).scoring.uniqueness == "mark"  # from scratch honest work is often marked
    assert cont["scoring.min_assigned"] == scratch["scoring.min_assigned"] == "0.01"
