"""The adversarial demo's settings (woolf/demo/adversaries.py)."""

from __future__ import annotations

import pytest

from woolf.demo.adversaries import _lazy, demo_settings
from woolf.demo.kinds import parse_kinds
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides
from woolf.validator import Validator


@pytest.mark.unit
def test_the_adversarial_demo_refuses_not_unique_deltas_only_when_continuing_a_pretrained_model():
    from woolf.demo.adversaries import demo_settings
    from woolf.protocol.config import LedgerConfig
    from woolf.protocol.config_text import apply_overrides

    cont, scratch = demo_settings(True), demo_settings(False)
    assert apply_overrides(LedgerConfig(), cont).scoring.uniqueness == "reject"
    assert apply_overrides(LedgerConfig(), scratch).scoring.uniqueness == "mark"  # from scratch honest work is often marked
    assert cont["scoring.min_assigned"] == scratch["scoring.min_assigned"] == "0.01"


# The demo's `lazy` adversary and its re-training settings.
@pytest.mark.unit
def test_lazy_is_a_kind_and_adversarial_demos_retrain_every_pr():
    assert parse_kinds("free-rider,overfitter,lazy") == ["free-rider", "overfitter", "lazy"]
    for pretrained in (True, False):
        assert apply_overrides(LedgerConfig(), demo_settings(pretrained)).validators.retrain_rate == 1.0


def test_the_lazy_adversarys_delta_is_whole_sized_and_caught_by_its_retraining(make_net):
    from woolf.demo.adversaries import _claimed, _submit

    net = make_net(**{"validators.retrain_rate": "1", "policy.min_improvement": "-10"})
    lazy, val = net.clone("lazy"), net.clone("val")
    lazy.fetch()
    base = lazy.head("refs/remotes/origin/main")
    weights = _lazy(lazy, lazy.workload(), "lazy", base, 20, 5)
    _submit(lazy, "lazy", base, weights, "my shard", _claimed(lazy, "lazy", base, 20, 5))
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "rejected" and v.reason.startswith("retrain:") and "retrain-failed" in v.flags
