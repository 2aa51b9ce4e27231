"""The config as text (woolf/protocol/config_text.py): dotted-key overrides."""

from __future__ import annotations

import pytest

from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides

pytestmark = pytest.mark.unit


def test_overrides():
    cfg = apply_overrides(LedgerConfig(), {"policy.min_improvement": "-0.5",
                                           "workload.params.d_model": "16",
                                           "merge.staleness.kind": "hinge"})
    assert cfg.policy.min_improvement == -0.5
    assert cfg.workload.params == {"d_model": 16}
    assert cfg.merge.staleness.kind == "hinge"
