"""`woolf export`: a version as a directory that transformers loads offline, or a charlm's file."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from woolf.errors import UsageError
from woolf.ledger.export import export_version
from woolf.validator import Validator


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

    from tests.workloads.hf.test_workload import hf_network, tiny

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


def test_a_bf16_ledgers_export_after_small_merges_keeps_them_or_says_what_it_loses(tmp_path, cli):
    """Small fine-tuning updates on float32 masters are below half a bf16 ulp: an export cast to the
    checkpoint's bf16 equalled genesis. The default writes the masters' float32 then, and an export
    asked in bf16 says how much of the merged update survives."""
    pytest.importorskip("transformers")
    from tests.workloads.hf.test_workload import hf_network, tiny

    net = hf_network(tmp_path / "net", tiny.make_tiny_model(tmp_path / "m", dtype="bfloat16"),
                     **{"workload.params.lr": "0.00001"})  # a fine-tune's small steps
    alice, val = net.clone("alice"), net.clone("val")
    for seed in (0, 1):
        net.train_submit(alice, "alice", steps=2, seed=seed)
        assert [v.state for v in Validator(val, device="cpu").run()] == ["merged"]
        alice.pull()
    val.pull()
    masters = load_file(val.weights_path(val.show(2)))
    genesis = load_file(val.weights_path(val.show(0)))
    changed = sum(int((masters[k] != genesis[k]).sum()) for k in masters)
    assert changed > 0

    r = cli("export", "2", str(tmp_path / "out"), cwd=val.root)
    assert r.returncode == 0, r.stderr
    exported = load_file(tmp_path / "out" / "model.safetensors")
    assert all(torch.equal(exported[k], masters[k]) for k in masters)  # every merged update preserved
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "float32"
    record = json.loads((tmp_path / "out" / "woolf-export.json").read_text())
    p = record["precision"]
    assert p["chose"] == "masters" and p["changed"] == changed and p["share"] < 0.9
    assert "wrote float32, the ledger's master weights: bfloat16" in r.stderr and f"{changed:,} elements" in r.stderr

    r = cli("export", "2", str(tmp_path / "half"), "--dtype", "bfloat16", cwd=val.root)
    assert r.returncode == 0, r.stderr
    half = load_file(tmp_path / "half" / "model.safetensors")
    kept = sum(int((half[k] != genesis[k].to(torch.bfloat16)).sum()) for k in half)
    assert kept == p["kept"] < changed  # what the message counts is what the file holds
    assert f"note: bfloat16 keeps {kept / changed:.1%} of the {changed:,} elements" in r.stderr
    assert "`--dtype float32` keeps all" in r.stderr, r.stderr


@pytest.mark.parametrize("dangling", [False, True])
def test_export_into_a_symlinked_target_is_a_usage_error(make_net, tmp_path, dangling):
    from woolf.errors import UsageError
    from woolf.ledger.export import export_version

    net = make_net()
    target = tmp_path / "real"
    if not dangling:
        target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):  # main: NotADirectoryError from rmdir/rename
        export_version(net.work, 0, link)
    assert link.is_symlink() and (dangling or not any(target.iterdir()))
