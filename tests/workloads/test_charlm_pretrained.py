"""The pretrained genesis (woolf/workloads/charlm_pretrained.py): trained centrally once, deterministically, and cached."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from woolf.workloads.charlm import CharLM
from woolf.workloads.charlm_pretrained import pretrained_genesis

pytestmark = pytest.mark.unit


TINY = {"d_model": 16, "n_layer": 1, "n_head": 2, "context": 16, "batch_size": 4, "benchmark_bytes": 2048,
        "shard_files": 2}


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
