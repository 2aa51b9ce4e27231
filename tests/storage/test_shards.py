"""Sharded checkpoints (woolf/storage/shards.py) in: `woolf init --weights DIR` with model.safetensors.index.json, round trip
through train, submit, validate and export to `from_pretrained`; and each bad index refused."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers")

from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
from woolf.errors import UsageError  # noqa: E402
from woolf.ledger.create import CreateOptions
from woolf.ledger.export import export_version  # noqa: E402
from woolf.ledger.ledger import Ledger  # noqa: E402
from woolf.storage.shards import INDEX  # noqa: E402
from woolf.validator import Validator  # noqa: E402


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("sharded")
    single = tiny.make_tiny_model(root / "single")
    out = root / "model"
    AutoModelForCausalLM.from_pretrained(single).save_pretrained(out, max_shard_size="40KB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(single / name, out / name)
    assert (out / INDEX).is_file() and len(list(out.glob("model-*.safetensors"))) >= 3
    return out


def test_a_sharded_model_round_trips_to_from_pretrained(tmp_path, sharded_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    net = hf_network(tmp_path, sharded_dir)
    w0 = net.work.load_weights(net.work.show(0))
    shards = {}
    for p in sharded_dir.glob("model-*.safetensors"):
        shards.update(load_file(p))
    assert set(w0) <= set(shards) and all(torch.equal(w0[k], shards[k]) for k in w0)
    alice, val = net.clone("alice"), net.clone("val")
    net.train_submit(alice, "alice", steps=2)
    assert [v.state for v in Validator(val, device="cpu").run()] == ["merged"]
    out = tmp_path / "exported"
    result = export_version(val, 1, out, max_shard_size="30KB")
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert INDEX in result["files"] and len(shards) >= 2 and shards[0].startswith("model-00001-of-")
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    w1 = val.load_weights(val.show(1))
    state = model.state_dict()
    assert all(torch.equal(state[k], w1[k]) for k in w1)
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    ids = tok("def main():", return_tensors="pt").input_ids
    gen = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert gen.shape[1] == ids.shape[1] + 5


def _bad(tmp_path, sharded_dir, how):
    d = tmp_path / "bad"
    shutil.copytree(sharded_dir, d)
    index = json.loads((d / INDEX).read_text())
    shards = sorted(set(index["weight_map"].values()))
    if how == "missing":
        (d / shards[1]).unlink()
        return d, shards[1]
    if how == "extra":
        shutil.copy(d / shards[0], d / "model-00009-of-00009.safetensors")
        return d, "model-00009-of-00009.safetensors"
    if how == "overlap":
        first, last = load_file(d / shards[0]), load_file(d / shards[-1])
        name = sorted(first)[0]
        save_file({**last, name: first[name]}, d / shards[-1], metadata={"format": "pt"})
        return d, shards[-1]
    if how == "outside":
        victim = sorted(index["weight_map"])[0]
        index["weight_map"][victim] = "../elsewhere.safetensors"
        (d / INDEX).write_text(json.dumps(index))
        return d, INDEX
    if how == "mixed":
        w = load_file(d / shards[1])
        save_file({k: v.bfloat16() for k, v in w.items()}, d / shards[1], metadata={"format": "pt"})
        return d, shards[1]
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["missing", "extra", "overlap", "outside", "mixed"])
def test_a_bad_sharded_directory_is_refused_in_one_line(tmp_path, sharded_dir, how):
    d, names = _bad(tmp_path, sharded_dir, how)
    with pytest.raises(UsageError) as exc:
        Ledger.init(tmp_path / "led", CreateOptions(storage=str(tmp_path / "st"), workload="transformers", weights=d))
    assert names in exc.value.message and "\n" not in exc.value.message, exc.value.message
    assert not (tmp_path / "led").exists() and not (tmp_path / "st").exists()
