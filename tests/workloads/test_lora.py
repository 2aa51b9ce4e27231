"""charlm's LoRA training with peft (woolf/workloads/charlm_lora.py, issue 33)."""

from __future__ import annotations

import pytest
import torch

from woolf.core.lora import expand
from woolf.errors import ConfigError, UsageError
from woolf.protocol.lora_spec import parse_lora
from woolf.workloads.charlm import CharLM
from woolf.workloads.features import LORA, features_of

pytestmark = pytest.mark.unit


def _small() -> CharLM:
    return CharLM(d_model=32, n_layer=1, context=32, batch_size=8, benchmark_bytes=4096, shard_files=2)


def test_factors_per_target_tensor_in_the_delta_files_convention():
    wl = _small()
    assert LORA in features_of(wl)
    w0 = wl.genesis(0)
    data = wl.default_data("alice", 0)
    factors, summary = wl.train_lora(w0, data, 4, parse_lora("r=2"), seed=1)
    assert set(factors) == {"blocks.0.qkv.weight", "blocks.0.proj.weight", "blocks.0.mlp.0.weight",
                            "blocks.0.mlp.2.weight"}
    for name, (A, B, scale) in factors.items():
        rows, cols = w0[name].shape
        assert A.shape == (2, cols) and B.shape == (rows, 2) and scale == 2.0 and A.dtype == torch.float32
        assert B.abs().sum() > 0  # trained (peft starts B at zero)
    assert summary["lora"]["targets"] == 4 and summary["optimizer"] == "fresh (lora)"
    assert all(torch.equal(w0[k], v) for k, v in wl.genesis(0).items())  # the version's weights untouched
    again, _ = wl.train_lora(w0, data, 4, parse_lora("r=2"), seed=1)
    assert all(torch.equal(again[k][1], factors[k][1]) for k in factors)  # seeded: the same factors
    merged = {**w0, **{k: w0[k] + expand(A, B, s) for k, (A, B, s) in factors.items()}}
    assert wl.evaluate(merged, wl.benchmark_bytes())["loss"] != wl.evaluate(w0, wl.benchmark_bytes())["loss"]


def test_named_targets_and_refusals():
    wl = _small()
    w0, data = wl.genesis(0), wl.default_data("alice", 0)
    factors, _ = wl.train_lora(w0, data, 1, parse_lora("r=1,targets=head"))
    assert set(factors) == {"head.weight"}
    with pytest.raises(UsageError, match="r=2,alpha=4,targets=nothing"):
        wl.train_lora(w0, data, 1, parse_lora("r=2,targets=nothing"))
    with pytest.raises(UsageError, match="only linear layers are LoRA targets"):
        wl.train_lora(w0, data, 1, parse_lora("r=2,targets=tok"))
    with pytest.raises(UsageError, match="charlm trains in float32"):
        wl.train_lora(w0, data, 1, parse_lora("r=2,dtype=bf16"))
    # ckpt (on by default since gradient checkpointing became the transformers default) asks for nothing here
    assert set(wl.train_lora(w0, data, 1, parse_lora("r=2,ckpt=1"))[0]) == set(wl.train_lora(w0, data, 1, parse_lora("r=2,ckpt=0"))[0])
    assert CharLM(lora="r=4").lora == parse_lora("r=4") and CharLM().lora is None
    with pytest.raises(ConfigError, match="workload.params.lora = 'r=0'"):
        CharLM(lora="r=0")
