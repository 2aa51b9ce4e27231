"""The charlm workload (woolf/workloads/charlm.py): each named participant trains on its own part of the
corpus, bad domains are refused, a fresh optimizer warms up."""

from __future__ import annotations

import pytest

from woolf.errors import ConfigError, UsageError
from woolf.protocol.config import WorkloadConfig
from woolf.workloads import corpus
from woolf.workloads.base import TrainData, load_workload
from woolf.workloads.charlm import CharLM
from woolf.workloads.charlm_data import domain_files

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




