"""`woolf export`: a version as a directory that transformers loads offline, or a charlm's file."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from woolf.errors import UsageError
from woolf.ledger.export import export_version


def test_charlm_exports_a_plain_safetensors_file_and_a_note(tmp_path, network):
    out = export_version(network.work, 0, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.txt", "model.safetensors",
                                                                    "woolf-export.json"]
    w = load_file(tmp_path / "out" / "model.safetensors")
    w0 = network.work.load_weights(network.work.show(0))
    assert set(w) == set(w0) and all(torch.equal(w[k], w0[k]) for k in w0)
    assert out["weights_sha256"] == network.work.show(0).weights_sha256
    half = export_version(network.work, 0, tmp_path / "half", dtype="bfloat16")
    assert half["dtype"] == "bfloat16"
    assert all(v.dtype == torch.bfloat16 for v in load_file(tmp_path / "half" / "model.safetensors").values())


def test_export_refuses_a_non_empty_directory_and_writes_nothing(tmp_path, network):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep me")
    with pytest.raises(UsageError, match="not empty") as exc:
        export_version(network.work, 0, tmp_path / "full")
    assert "\n" not in exc.value.message
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["mine.txt"]
    assert not [p for p in tmp_path.iterdir() if ".export-" in p.name]
    with pytest.raises(UsageError, match="max-shard-size"):
        export_version(network.work, 0, tmp_path / "x", max_shard_size="lots")
    assert not (tmp_path / "x").exists()


def test_a_bf16_ledger_exports_in_bf16_and_loads_with_transformers(tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.workloads.test_hf import hf_network, tiny

    model_dir = tiny.make_tiny_model(tmp_path / "m", dtype="bfloat16")
    net = hf_network(tmp_path / "net", model_dir)
    out = tmp_path / "exported"
    result = export_version(net.work, 0, out)  # the checkpoint's dtype by default
    assert result["dtype"] == "bfloat16" and "model.safetensors" in result["files"]
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert model.dtype == torch.bfloat16
    original = load_file(model_dir / "model.safetensors")
    state = model.state_dict()
    assert all(torch.equal(state[k], original[k]) for k in original)  # exact: float32 masters of bf16 values
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    ids = tok("import os", return_tensors="pt").input_ids
    assert model.generate(ids, max_new_tokens=4, do_sample=False).shape[1] == ids.shape[1] + 4
