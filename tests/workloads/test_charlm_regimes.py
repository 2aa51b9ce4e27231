"""charlm's data regimes and pretrained genesis: each participant its own part of the corpus, a genesis
trained centrally once and cached, a warm-up for a fresh optimizer, and the demo's four regimes."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from woolf.demo.regimes import REGIMES, prepare_regime
from woolf.errors import ConfigError, UsageError
from woolf.protocol.config import WorkloadConfig
from woolf.report.story import joining_sentence, regime_sentence
from woolf.workloads import corpus
from woolf.workloads.base import TrainData, load_workload
from woolf.workloads.charlm import CharLM
from woolf.workloads.charlm_data import domain_files
from woolf.workloads.charlm_pretrained import pretrained_genesis

pytestmark = pytest.mark.unit
TINY = {"d_model": 16, "n_layer": 1, "n_head": 2, "context": 16, "batch_size": 4, "benchmark_bytes": 2048,
        "shard_files": 2}


def test_each_named_contributor_trains_on_its_own_part_of_the_corpus():
    names = ["p1", "p2", "p3"]
    wl = CharLM(domains=names, shard_files=4)
    parts = [set(domain_files(i, 3)) for i in range(3)]
    assert set().union(*parts) == set(corpus.pool_files())  # every pool file is someone's
    assert all(not (parts[i] & parts[j]) for i in range(3) for j in range(i + 1, 3))  # and only one's
    for i, n in enumerate(names):
        seen = {f for v in range(5) for f in wl.default_data(n, v).files}
        assert seen <= parts[i] and len(seen) > 4  # its own part, a new shard per version
        assert wl.default_data(n, 2).files == CharLM(domains=names, shard_files=4).default_data(n, 2).files
        assert wl.default_data(n, 2).source == f"domain {i + 1}/3:{n}@v2"
    # anyone not named (an adversary, a validator's random comparison) samples the whole pool, as before
    assert wl.default_data("mallory", 1).files == CharLM(shard_files=4).default_data("mallory", 1).files


@pytest.mark.parametrize("bad", [["p1", "p1"], "p1,p2", [1, 2], [""], [f"p{i}" for i in range(65)]])
def test_bad_domains_in_a_ledger_config_are_refused(bad):
    with pytest.raises(ConfigError, match="workload.params.domains"):
        load_workload(WorkloadConfig(params={"domains": bad}))


def test_pretrained_genesis_is_built_once_deterministically_and_cached(tmp_path):
    wl = CharLM(**TINY)
    said = []
    path = pretrained_genesis(wl, steps=20, cache=tmp_path / "a", progress=said.append)
    assert len(said) == 1 and path.is_file()
    stamp = path.stat().st_mtime_ns
    assert pretrained_genesis(wl, steps=20, cache=tmp_path / "a", progress=said.append) == path
    assert len(said) == 1 and path.stat().st_mtime_ns == stamp  # cached: not built again
    again = pretrained_genesis(wl, steps=20, cache=tmp_path / "b")  # built afresh elsewhere: the same bytes
    assert again.name == path.name and again.read_bytes() == path.read_bytes()
    warm = pretrained_genesis(CharLM(**{**TINY, "lr": 1e-3}, optimizer_warmup=60, domains=["p1"]), steps=20,
                              cache=tmp_path / "c")
    assert warm.read_bytes() == path.read_bytes()  # the ledger's own training settings (its rate too) do not enter it
    other = pretrained_genesis(CharLM(**{**TINY, "d_model": TINY["d_model"] * 2}), steps=20, cache=tmp_path / "a")
    assert other != path  # another model builds its own
    bench = wl.benchmark_bytes()
    assert wl.evaluate(load_file(str(path)), bench)["loss"] < wl.evaluate(wl.genesis(0), bench)["loss"] - 0.5


def test_optimizer_warmup_ramps_a_fresh_optimizer_only(tmp_path):
    data = TrainData([corpus.read(f) for f in corpus.pool_files()[:2]], "t")
    g = CharLM(**TINY).genesis(0)

    def moved(wl, state=None):
        w, _ = wl.train(g, data, 1, seed=0, state_dir=state)
        return sum((w[k] - g[k]).abs().sum().item() for k in g)

    plain, warm = moved(CharLM(**TINY)), moved(CharLM(**TINY, optimizer_warmup=10))
    assert warm < 0.2 * plain  # the first step is at a tenth of the rate
    wl = CharLM(**TINY, optimizer_warmup=2)
    wl.train(g, data, 3, seed=0, state_dir=tmp_path)  # its own step count passes the warm-up ...
    assert moved(wl, tmp_path) == pytest.approx(moved(CharLM(**TINY), None), rel=0.5)  # ... and it stays off
    with pytest.raises(UsageError, match="optimizer_warmup"):
        CharLM(optimizer_warmup=-1)


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


def test_summary_and_report_name_the_regime_in_words():
    from woolf.cli.demo.commands import demo

    choices = next(p for p in demo.params if p.name == "regime").type.choices
    assert list(choices) == list(REGIMES)
    demo_json = {"regime": "continued-domain", "regime_words": REGIMES["continued-domain"].words,
                 "final_loss": 1.88, "alone_loss": 1.93, "parallel_loss": 1.83}
    assert regime_sentence(demo_json) == ("Each participant trains on its own data, continuing a pretrained "
                                          "model (`woolf demo --regime continued-domain`).")
    assert joining_sentence(demo_json).startswith("joining paid") and "50%" in joining_sentence(demo_json)
    assert regime_sentence({}) is None and joining_sentence({"final_loss": 2.0}) is None
    assert joining_sentence({**demo_json, "final_loss": 1.95}).startswith("joining did not pay")
