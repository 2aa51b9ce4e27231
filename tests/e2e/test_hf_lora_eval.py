"""What a LoRA participant is told is what the validator finds (issue 33, memory item): the "after" loss
of `woolf train --lora` is the loss of the merged version, and training holds one model.

A tiny local GPT-2 (examples/make_tiny_model.py): nothing is downloaded.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from safetensors.torch import load_file  # noqa: E402

from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
from woolf.participant import SubmitOptions, TrainOptions, submit, train  # noqa: E402
from woolf.validator import Validator  # noqa: E402


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory):
    return tiny.make_tiny_model(tmp_path_factory.mktemp("models") / "wide", width=128, heads=4)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.dtype == torch.float32 else t


@pytest.mark.parametrize(("dtype", "ledger_dtype"), [("fp32", "float32"), ("bf16", "bfloat16"), ("bf16", "float32")])
def test_lora_after_loss_is_the_validators_loss_of_the_merged_version(tmp_path, wide_dir, dtype, ledger_dtype):
    """fp32: the frozen model's tensors are the version's, merged where they are; bf16: the base is read a
    tensor at a time and cast to bf16, each target's merge made from its float32 tensor and cast. Either
    way the trained file is the validator's merge bit for bit; where the ledger evaluates in the base's
    dtype (workload.params.eval_dtype) so is the loss; where it does not, both losses are measured in the
    base's dtype here (an estimate, said so), close to the validator's."""
    net = hf_network(tmp_path, wide_dir, **{"scoring.uniqueness": "off", "scoring.min_effect": "0",
                                            "policy.min_improvement": "-1e9", "workload.params.eval_dtype": ledger_dtype})
    alice, val = net.clone("alice"), net.clone("val")
    v0 = alice.load_weights(alice.show(0))
    rec = train(alice, TrainOptions(steps=3, contributor="alice", device="cpu", lora=f"r=4,dtype={dtype}"))
    lora = rec["training"]["lora"]
    assert lora["dtype"] == {"fp32": "float32", "bf16": "bfloat16"}[dtype]
    exact = lora["dtype"] == ledger_dtype
    assert lora["evaluation"]["exact"] is exact and lora["evaluation"]["dtype"] == lora["dtype"]
    trained = load_file(rec["weights"])
    assert {k: t.dtype for k, t in trained.items()} == {k: t.dtype for k, t in v0.items()}  # masters, not bf16
    pr = submit(alice, SubmitOptions(contributor="alice"))
    [v] = Validator(val, device="cpu").run()
    assert v.id == pr["id"] and v.state == "merged", v.reason
    v1 = val.load_weights(val.show(1))
    changed = {k for k in v0 if not torch.equal(_bits(v1[k]), _bits(v0[k]))}
    # the default targets: every linear layer of the blocks (attention and MLP), nothing else
    assert changed and all(any(f".{n}.weight" in k for n in ("c_attn", "c_proj", "c_fc")) for k in changed)
    assert any(".mlp.c_fc." in k for k in changed) and any(".attn.c_attn." in k for k in changed)
    for name in v1:  # what `train` kept is the validator's merge, bit for bit
        assert torch.equal(_bits(trained[name]), _bits(v1[name])), name
    if exact:
        assert rec["metrics"]["after"]["loss"] == val.show(1).metrics["loss"]
        assert rec["metrics"]["before"]["loss"] == val.show(0).metrics["loss"]
    else:  # bf16 arithmetic against the validator's float32
        assert rec["metrics"]["before"]["loss"] != val.show(0).metrics["loss"]
        assert abs(rec["metrics"]["after"]["loss"] - val.show(1).metrics["loss"]) < 0.02
    assert rec["gate"]["passes"]


def test_the_evaluation_model_is_built_without_touching_its_memory(wide_dir):
    """transformers' random initialisation of a model whose parameters are then assigned wrote a
    second model's worth of memory (the 152M LoRA run's peak: RESULTS §17); built uninitialised
    it costs nothing until the weights are assigned, and it computes exactly what an initialised one does."""
    from transformers import AutoModelForCausalLM, GPT2Config

    from woolf.workloads.hf.modeldir import canonical
    from woolf.workloads.hf.training import assign, uninitialised

    def rss_mib() -> float:
        with open("/proc/self/status") as fh:
            return int(next(line for line in fh if line.startswith("VmRSS:")).split()[1]) / 1024

    config = GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=32000, n_positions=64)  # 45M params
    size = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters()) * 4 / 2**20
    before = rss_mib()
    model = uninitialised(config, torch.float32)
    assert rss_mib() - before < size / 4, (rss_mib() - before, size)
    torch.manual_seed(0)
    ref = AutoModelForCausalLM.from_config(config).eval()
    weights = {k: v.clone() for k, v in canonical(ref).items()}
    model = assign(model, weights, "cpu", copy=False).eval()
    x = torch.randint(0, 32000, (2, 16))
    with torch.no_grad():
        assert torch.equal(model(input_ids=x).logits, ref(input_ids=x).logits)
