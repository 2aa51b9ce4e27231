"""QLoRA (woolf/workloads/hf/qlora.py) on a tiny Llama: ``--lora ...,base=nf4`` trains over a 4-bit base where
bitsandbytes runs (the factors merged into the float32 masters like any LoRA PR's), and says in one line
why not where it cannot (not installed, a model without torch Linear layers, a workload without it).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytest.importorskip("peft")

from safetensors.torch import load_file  # noqa: E402

from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
from woolf.errors import UsageError  # noqa: E402
from woolf.participant import SubmitOptions, TrainOptions, submit, train  # noqa: E402
from woolf.participant.state import work_dir  # noqa: E402
from woolf.validator import Validator  # noqa: E402

HAVE_BNB = importlib.util.find_spec("bitsandbytes") is not None
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SETTINGS = {"scoring.uniqueness": "off", "scoring.min_effect": "0", "policy.min_improvement": "-1e9"}


@pytest.fixture(scope="module")
def llama_bf16(tmp_path_factory):
    return tiny.make_tiny_model(tmp_path_factory.mktemp("models") / "llama", arch="llama", width=64, heads=2,
                                dtype="bfloat16")


@pytest.mark.skipif(not HAVE_BNB, reason="bitsandbytes is not installed (the qlora extra)")
def test_qlora_trains_submits_and_merges_into_the_float32_masters(tmp_path, llama_bf16):
    net = hf_network(tmp_path, llama_bf16, **SETTINGS)
    alice, val = net.clone("alice"), net.clone("val")
    v0 = alice.load_weights(alice.show(0))
    rec = train(alice, TrainOptions(steps=3, contributor="alice", device="cpu", lora="r=4,base=nf4"))
    lora = rec["training"]["lora"]
    assert lora["base"] == "nf4" and lora["evaluation"] == {"dtype": "nf4", "exact": False}
    trained = load_file(rec["weights"])
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert pr["delta_kind"] == "lora"
    [v] = Validator(val, device="cpu").run()
    assert v.state == "merged", v.reason
    v1 = val.load_weights(val.show(1))
    changed = {k for k in v0 if not torch.equal(v1[k], v0[k])}
    # the default targets: every linear layer but the output head (the 4-bit ones), merged into the masters
    assert changed == {k for k in v0 if k.endswith(tuple(f"{n}.weight" for n in LINEARS))}
    assert all(torch.equal(trained[k], v1[k]) for k in v1)  # the float32 masters' merge, bit for bit
    # evaluated on the NF4 base with the adapters attached: an estimate near the validator's float32 numbers
    assert abs(rec["metrics"]["after"]["loss"] - val.show(1).metrics["loss"]) < 0.05
    assert abs(rec["metrics"]["before"]["loss"] - val.show(0).metrics["loss"]) < 0.05


def test_nf4_on_a_model_bitsandbytes_cannot_quantize_is_one_line(tmp_path):
    """GPT-2's layers are Conv1D: refused before anything is reserved or written."""
    net = hf_network(tmp_path, tiny.make_tiny_model(tmp_path / "gpt2"), **SETTINGS)
    alice = net.clone("alice")
    with pytest.raises(UsageError, match="bitsandbytes quantizes torch Linear layers.*Conv1D"):
        train(alice, TrainOptions(steps=1, contributor="alice", device="cpu", lora="r=4,base=nf4"))
    assert not (work_dir(alice) / "trained.json").exists() and not (work_dir(alice) / "lora.safetensors").exists()


@pytest.mark.skipif(HAVE_BNB, reason="bitsandbytes is installed here: its absence cannot be seen")
def test_nf4_without_bitsandbytes_is_one_line(tmp_path, llama_bf16):
    net = hf_network(tmp_path, llama_bf16, **SETTINGS)
    alice = net.clone("alice")
    with pytest.raises(UsageError, match="needs bitsandbytes, which is not installed"):
        train(alice, TrainOptions(steps=1, contributor="alice", device="cpu", lora="r=4,base=nf4"))
    assert not (work_dir(alice) / "trained.json").exists()


def test_nf4_on_charlm_is_one_line(make_net):
    net = make_net(**{"delta.accept": '["dense", "topk", "lora"]'})
    alice = net.clone("alice")
    with pytest.raises(UsageError, match="no quantized base"):
        train(alice, TrainOptions(steps=1, contributor="alice", device="cpu", lora="r=2,base=nf4"))
