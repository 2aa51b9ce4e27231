"""float32 master weights for a bf16 checkpoint: the ledger stores and merges float32, so small
updates land; a bf16 delta is refused; a ledger that asks to keep bf16 works as before."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers")

from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
from woolf.audit.recompute import audit  # noqa: E402
from woolf.errors import InvalidWeightsError  # noqa: E402
from woolf.forges import forge_for  # noqa: E402
from woolf.ledger.submission import SubmitDeltaOptions, submit_delta  # noqa: E402
from woolf.participant import SubmitOptions, TrainOptions, submit, train  # noqa: E402
from woolf.validator import Validator  # noqa: E402

LOW_LR = {"workload.params.lr": "0.00001"}


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory):
    return tiny.make_tiny_model(tmp_path_factory.mktemp("m") / "bf16", dtype="bfloat16")


def _float32_copy(src, dst):
    """The same values as ``src``, saved as float32 (a float32 checkpoint of a bf16 model)."""
    import shutil

    shutil.copytree(src, dst)
    w = load_file(src / "model.safetensors")
    save_file({k: v.float() for k, v in w.items()}, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def _one_merge(root, model_dir, **overrides):
    net = hf_network(root, model_dir, **{**LOW_LR, **overrides})
    alice, val = net.clone("alice"), net.clone("val")
    net.train_submit(alice, "alice", steps=3)
    assert [v.state for v in Validator(val, device="cpu").run()] == ["merged"]
    return net, val


def test_a_bf16_checkpoint_gets_float32_masters_and_keeps_every_update(tmp_path, bf16_dir):
    net, val = _one_merge(tmp_path / "bf16", bf16_dir)
    params = net.work.config.workload.params
    assert params["dtype"] == "float32" and params["checkpoint_dtype"] == "bfloat16"
    w0 = val.load_weights(val.show(0))
    checkpoint = load_file(bf16_dir / "model.safetensors")
    assert all(w0[k].dtype == torch.float32 and torch.equal(w0[k], checkpoint[k].float()) for k in checkpoint)
    w1 = val.load_weights(val.show(1))
    # the same values as a float32 checkpoint, the same training: the same version 1, bit for bit
    _, ref = _one_merge(tmp_path / "f32", _float32_copy(bf16_dir, tmp_path / "f32model"))
    r1 = ref.load_weights(ref.show(1))
    assert all(torch.equal(w1[k], r1[k]) for k in r1)
    moved = sum(float((w1[k] - w0[k]).norm() ** 2) for k in w0) ** 0.5
    assert moved > 0
    assert audit(net.clone("carol")).ok


def test_a_bf16_delta_is_refused_by_submit_and_by_the_validator(tmp_path, bf16_dir):
    net = hf_network(tmp_path, bf16_dir)
    alice, val = net.clone("alice"), net.clone("val")
    result = train(alice, TrainOptions(steps=2, contributor="alice", device="cpu"))
    trained = load_file(result["weights"])
    assert all(v.dtype == torch.float32 for v in trained.values())  # trained weights stay float32
    cast = tmp_path / "cast.safetensors"
    save_file({k: v.bfloat16() for k, v in trained.items()}, cast)
    with pytest.raises(InvalidWeightsError, match="keeps float32 master weights") as exc:
        submit(alice, SubmitOptions(weights=cast, base_version=0, contributor="alice"))
    assert "\n" not in exc.value.message
    base = alice.show(0)
    w0 = alice.load_weights(base)
    delta = {k: (trained[k] - w0[k]).bfloat16() for k in w0}
    submit_delta(alice, delta, base, SubmitDeltaOptions(who="alice", the_forge=forge_for(alice)))
    (verdict,) = Validator(val, device="cpu").run()
    assert verdict.state == "rejected" and "keeps float32 master weights" in verdict.reason


def test_a_ledger_that_keeps_bf16_works_as_before(tmp_path, bf16_dir):
    """`--set workload.params.dtype=bfloat16` (and every ledger made before float32 masters)."""
    net, val = _one_merge(tmp_path, bf16_dir, **{"workload.params.dtype": "bfloat16"})
    assert net.work.config.workload.params["dtype"] == "bfloat16"
    w1 = val.load_weights(val.show(1))
    assert all(v.dtype == torch.bfloat16 for v in w1.values())
    assert json.loads((net.work.root / "ledger/model/config.json").read_text())["model_type"] == "gpt2"
