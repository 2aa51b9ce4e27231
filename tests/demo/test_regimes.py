"""The demo's four data regimes (woolf/demo/regimes.py): each sets the genesis and the data."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from woolf.demo.regimes import prepare_regime
from woolf.errors import ConfigError, UsageError
from woolf.workloads.charlm import CharLM

pytestmark = pytest.mark.unit


TINY = {"d_model": 16, "n_layer": 1, "n_head": 2, "context": 16, "batch_size": 4, "benchmark_bytes": 2048,
        "shard_files": 2}


def test_demo_regimes_set_genesis_and_data(tmp_path, monkeypatch):
    monkeypatch.setenv("WOOLF_CACHE", str(tmp_path / "cache"))
    small = {f"workload.params.{k}": str(v) for k, v in TINY.items()}
    assert prepare_regime("scratch-iid", ["p1", "p2"], small) == (None, {})
    weights, added = prepare_regime("scratch-domain", ["p1", "p2"], small)
    assert weights is None and json.loads(added["workload.params.domains"]) == ["p1", "p2"]
    weights, added = prepare_regime("continued-domain", ["p1", "p2"], small, pretrain_steps=5)
    assert weights.parent == tmp_path / "cache" and set(load_file(str(weights))) == set(CharLM(**TINY).genesis())
    assert json.loads(added["workload.params.domains"]) == ["p1", "p2"]
    assert added["workload.params.optimizer_warmup"] == "60"  # a fresh optimizer on a trained model warms up
    # each participant's own data on a trained model: each delta merges at its share of a round
    assert added["merge.alpha_base"] == "0.5" and added["merge.staleness.kind"] == "polynomial"
    _, added = prepare_regime("continued-domain", ["p1", "p2", "p3"], {**small, "merge.alpha_base": "1.0"},
                              pretrain_steps=5)
    assert "merge.alpha_base" not in added  # the user's --set wins
    assert prepare_regime("continued-iid", ["p1"], {**small, "workload.params.optimizer_warmup": "0"},
                          pretrain_steps=5) == (weights, {})  # the user's --set wins
    # a bad --set fails before anything is built; only charlm has a pretrained genesis
    with pytest.raises(ConfigError, match="merge.rule"):
        prepare_regime("continued-domain", ["p1"], {"merge.rule": "adam"}, pretrain_steps=7)
    with pytest.raises(UsageError, match="pretrained charlm"):
        prepare_regime("continued-iid", ["p1"], {"workload.name": "synthetic"}, pretrain_steps=7)
    with pytest.raises(UsageError, match="unknown regime"):
        prepare_regime("warm", ["p1"], {})
    assert len(list((tmp_path / "cache").iterdir())) == 1
