"""The one LoRA trainer (woolf/workloads/lora.py) on charlm: factors in the delta file's convention, named
targets, the learning-rate scale, carried adapters, and the refusals made before any training."""

from __future__ import annotations

import pytest
import torch

from woolf.core.lora import expand
from woolf.errors import ConfigError, UsageError
from woolf.protocol.lora_spec import parse_lora
from woolf.workloads.charlm import CharLM
from woolf.workloads.features import LORA, features_of
from woolf.workloads.lora import AdapterState, train_lora

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


def _norm(factors) -> float:
    return sum(float((B @ A).norm()) * s for A, B, s in factors.values())


def test_the_learning_rate_scale_scales_the_adapters_steps():
    wl = _small()
    w0, data = wl.genesis(0), wl.default_data("alice", 0)
    one, summary = train_lora(wl, w0, data, 3, parse_lora("r=2,lr_scale=1"), seed=1)
    ten, _ = train_lora(wl, w0, data, 3, parse_lora("r=2,lr_scale=10"), seed=1)
    assert summary["lora"]["spec"] == parse_lora("r=2,lr_scale=1").text()
    assert _norm(ten) > 3 * _norm(one)  # Adam's steps are about lr each: ten times the rate, a larger product


def test_carried_adapters_start_where_the_last_contribution_left_them_rebased_to_the_new_version():
    wl = _small()
    w0, data = wl.genesis(0), wl.default_data("alice", 0)
    state = AdapterState()
    first, s1 = train_lora(wl, w0, data, 4, parse_lora("r=2"), seed=1, state=state)
    assert s1["optimizer"] == "fresh (lora)" and state.steps == 4
    kept = {k: v.clone() for k, v in state.tensors.items()}
    assert set(kept) >= {"blocks.0.qkv.weight.lora_A", "exp_avg/blocks.0.qkv.weight.lora_B", "step"}
    # the next contribution, on the new version (the first one's product merged), at a rate too small to
    # move anything: it starts from the carried A, with B at zero (the model starts at the new version)
    w1 = {k: w0[k] + first[k][1] @ first[k][0] * first[k][2] if k in first else w0[k] for k in w0}
    still = parse_lora("r=2,lr_scale=0.000001")
    second, s2 = train_lora(wl, w1, data, 1, still, seed=2, state=state)
    assert s2["optimizer"] == "carried (lora, step 4)" and state.steps == 5
    fresh, _ = train_lora(wl, w1, data, 1, still, seed=2)
    for t, (A, B, _) in second.items():
        assert torch.allclose(A, kept[f"{t}.lora_A"], atol=1e-6) and float(B.abs().max()) < 1e-6
        assert not torch.allclose(fresh[t][0], kept[f"{t}.lora_A"], atol=1e-3)  # fresh: a new initialisation
    with pytest.raises(UsageError, match="the carried adapter .* this rank needs") as err:
        train_lora(wl, w1, data, 1, parse_lora("r=4"), state=state)
    assert "\n" not in err.value.message
    with pytest.raises(UsageError, match="the carried adapters are for other targets"):
        train_lora(wl, w1, data, 1, parse_lora("r=2,targets=qkv"), state=state)
    assert state.steps == 5  # a refused contribution changes nothing


@pytest.mark.parametrize("spec,msg", [
    ("r=2,targets=qkv+nothing", "target 'nothing' matches no layer of the model"),
    ("r=2,targets=ln1", "target 'ln1' is a LayerNorm; only linear layers are LoRA targets"),
    ("r=40", "rank 40 is above the width 32 of layer 'blocks.0.qkv'"),
])
def test_bad_targets_and_ranks_are_refused_before_training_naming_the_linear_layers(spec, msg):
    wl = _small()
    steps = []
    with pytest.raises(UsageError) as err:
        train_lora(wl, wl.genesis(0), wl.default_data("alice", 0), 1, parse_lora(spec),
                   progress=lambda *a: steps.append(a))
    assert msg in err.value.message and "\n" not in err.value.message and steps == []
    if "layer of the model" in msg:
        assert "blocks.0.qkv, blocks.0.proj, blocks.0.mlp.0, blocks.0.mlp.2, head" in err.value.hint


def test_the_rank_check_reads_a_linear_layers_features_not_its_stored_weight():
    """A 4-bit layer (bitsandbytes' Linear4bit, a torch Linear) stores its weight packed, N/2 x 1 bytes: the
    rank fits the layer's features, not that shape (QLoRA was refused at any r > 1; test_qlora.py runs the
    real layer where bitsandbytes is installed)."""
    from woolf.workloads.lora import check_targets

    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    model[0].weight = torch.nn.Parameter(torch.zeros(64 * 32 // 2, 1, dtype=torch.uint8), requires_grad=False)
    check_targets(model, parse_lora("r=16"), None)
    with pytest.raises(UsageError, match="rank 40 is above the width 32 of layer '0'"):
        check_targets(model, parse_lora("r=40"), None)
