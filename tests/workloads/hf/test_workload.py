"""The `transformers` workload: a tiny local causal LM through init, train, submit, validate, audit.

Nothing is downloaded: examples/make_tiny_model.py trains a byte-level BPE tokenizer on the
standard library's sources and saves a 2-layer GPT-2 (and a Llama) with random weights.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("transformers")

import pytest
from safetensors.torch import save_file

from tests.conftest import Network, git  # noqa: E402
from woolf.audit.recompute import audit  # noqa: E402
from woolf.errors import (  # noqa: E402
    ConfigError,
    IntegrityError,
    InvalidWeightsError,  # noqa: E402
    UsageError,
)
from woolf.forges import forge_for  # noqa: E402
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger  # noqa: E402
from woolf.ledger.submission import SubmitDeltaOptions, submit_delta  # noqa: E402
from woolf.participant import SubmitOptions, TrainOptions, submit, train  # noqa: E402
from woolf.validator import Validator  # noqa: E402
from woolf.workloads.hf import Transformers  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("make_tiny_model", ROOT / "examples" / "make_tiny_model.py")
tiny = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny)

SMALL = {"workload.steps": "4", "workload.params.context": "32", "workload.params.batch_size": "4",
         "workload.params.benchmark_bytes": "3000", "workload.params.shard_files": "2",
         "workload.params.lr": "0.001", "policy.min_improvement": "-10"}


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> Path:
    return tiny.make_tiny_model(tmp_path_factory.mktemp("models") / "gpt2")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def hf_network(root: Path, model_dir: Path, **overrides) -> Network:
    settings = {**SMALL, **{k: str(v) for k, v in overrides.items()}}
    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers",
                       weights=model_dir, overrides=settings))
    hub = root / "hub.git"
    git("clone", "-q", "--bare", str(work.root), str(hub), cwd=root)
    git("remote", "add", "origin", str(hub), cwd=work.root)
    return Network(root, work, hub)


def test_whole_loop_init_train_submit_validate_audit(tmp_path, gpt2_dir):
    net = hf_network(tmp_path, gpt2_dir, **{"workload.params.grad_accum": "2"})
    cfg = net.work.config.workload
    assert cfg.name == "transformers" and set(cfg.params["files"]) >= {"config.json", "tokenizer.json"}
    assert (net.work.root / "ledger/model/config.json").read_bytes() == (gpt2_dir / "config.json").read_bytes()
    # genesis is the checkpoint, tensor for tensor
    genesis = net.work.load_weights(net.work.show(0))
    checkpoint = load_file(gpt2_dir / "model.safetensors")
    assert set(genesis) == set(checkpoint)
    assert all(torch.equal(genesis[k], checkpoint[k]) for k in checkpoint)
    assert set(net.work.show(0).metrics) == {"loss", "ppl"}

    alice, bob, val = net.clone("alice"), net.clone("bob"), net.clone("val")
    a = net.train_submit(alice, "alice", steps=4)
    b = net.train_submit(bob, "bob", steps=4, seed=1)
    verdicts = Validator(val, device="cpu").run()
    assert [(v.id, v.state) for v in verdicts] == [(a["id"], "merged"), (b["id"], "merged")]
    assert verdicts[1].staleness == 1
    carol = net.clone("carol")
    report = audit(carol)
    assert report.ok and report.versions_checked >= 2
    v2 = carol.load_weights(carol.show(2))
    assert any(not torch.equal(v2[k], genesis[k]) for k in genesis)
    # a second contribution resumes the optimizer's moments
    from woolf.participant import train

    again = train(alice, TrainOptions(steps=2, contributor="alice", device="cpu"))
    assert again["training"]["optimizer"].startswith("resumed at step 4")
    assert again["training"]["tokens"] == 2 * 2 * 4 * 32  # steps x grad_accum x batch x context


def test_evaluation_is_deterministic_and_per_token(tmp_path, gpt2_dir):
    net = hf_network(tmp_path, gpt2_dir)
    wl, bench = net.work.workload(), net.work.benchmark()
    w0 = net.work.load_weights(net.work.show(0))
    first = wl.evaluate(w0, bench)
    again = Ledger.open(net.work.root).workload().evaluate(w0, bench)  # a fresh model instance
    assert first == again and first == net.work.show(0).metrics
    assert abs(first["ppl"] - torch.tensor(first["loss"]).exp().item()) < 1e-6 * first["ppl"]
    assert 4.0 < first["loss"] < 8.0  # random weights: about log(vocab = 512) = 6.2 nats per token


def test_follow_shift_bf16_autocast_and_llama_bf16_checkpoint(tmp_path):
    model = tiny.make_tiny_model(tmp_path / "llama", arch="llama", dtype="bfloat16")
    net = hf_network(tmp_path / "net", model, **{"workload.params.autocast": "bf16"})
    assert net.work.config.workload.params["dtype"] == "float32"  # float32 masters of a bf16 checkpoint
    assert net.work.config.workload.params["checkpoint_dtype"] == "bfloat16"
    wl = net.work.workload()
    w0 = net.work.load_weights(net.work.show(0))
    assert all(v.dtype == torch.float32 for v in w0.values())
    calls = []

    def follow():
        calls.append(1)
        return {k: torch.full(v.shape, 0.5) for k, v in w0.items()}

    out, summary = wl.train(w0, wl.default_data("alice", 0), steps=3, follow=follow, follow_every=1)
    assert len(calls) == 2 and summary["autocast"] == "bfloat16" and set(out) == set(w0)
    assert all(v.dtype == torch.float32 for v in out.values())
    shift = sum(float((out[k].float() - w0[k].float()).mean()) for k in w0) / len(w0)
    assert 0.9 < shift < 1.1  # two shifts of 0.5 each, plus small training steps
    assert torch.isfinite(torch.tensor(wl.evaluate(out, net.work.benchmark())["loss"]))


def test_refuses_a_config_that_needs_remote_code(tmp_path, gpt2_dir):
    d = _copy(gpt2_dir, tmp_path / "remote")
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilLM"}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="trust_remote_code"):
        Ledger.init(tmp_path / "a", CreateOptions(workload="transformers", weights=d))
    del cfg["auto_map"]
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "modeling_evil.py").write_text("raise SystemExit('ran the checkpoint code')\n")
    with pytest.raises(UsageError, match="never runs a checkpoint's code"):
        Ledger.init(tmp_path / "b", CreateOptions(workload="transformers", weights=d))
    cfg["model_type"] = "vit"  # known to transformers, but not a causal LM
    (d / "modeling_evil.py").unlink()
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="not a causal language model"):
        Ledger.init(tmp_path / "c", CreateOptions(workload="transformers", weights=d))
    assert not any((tmp_path / x).exists() for x in "abc")


@pytest.mark.parametrize("missing", ["model.safetensors", "tokenizer.json", "config.json"])
def test_refuses_a_directory_missing_files(tmp_path, gpt2_dir, missing):
    d = _copy(gpt2_dir, tmp_path / "m")
    (d / missing).unlink()
    with pytest.raises(UsageError, match=f"no {missing}"):
        Ledger.init(tmp_path / "led", CreateOptions(workload="transformers", weights=d))


def test_refuses_wrong_inputs(tmp_path, gpt2_dir):
    with pytest.raises(UsageError, match="needs --workload transformers"):
        Ledger.init(tmp_path / "a", CreateOptions(weights=gpt2_dir))  # charlm with a model directory
    with pytest.raises(UsageError, match="local model directory"):
        Ledger.init(tmp_path / "b", CreateOptions(workload="transformers"))  # no --weights
    # a tokenizer with more tokens than the model's embeddings
    d = _copy(gpt2_dir, tmp_path / "m")
    tiny.make_tokenizer(1024).save(str(d / "tokenizer.json"))
    with pytest.raises(UsageError, match="tokenizer does not match the model"):
        Ledger.init(tmp_path / "c", CreateOptions(workload="transformers", weights=d))
    # weights of another size than config.json says
    cfg = json.loads((d / "config.json").read_text())
    (d / "tokenizer.json").write_bytes((gpt2_dir / "tokenizer.json").read_bytes())
    (d / "config.json").write_text(json.dumps({**cfg, "n_embd": 64}))
    with pytest.raises(UsageError, match="does not fit config.json|cannot load"):
        Ledger.init(tmp_path / "d", CreateOptions(workload="transformers", weights=d))


def test_model_files_are_pinned(tmp_path, gpt2_dir):
    net = hf_network(tmp_path, gpt2_dir)
    params = net.work.config.workload.params
    read = {f"ledger/model/{n}": (net.work.root / "ledger/model" / n).read_bytes() for n in params["files"]}
    Transformers(**params).bind(read.get)  # the committed bytes
    tampered = {**read, "ledger/model/tokenizer.json": read["ledger/model/tokenizer.json"] + b" "}
    with pytest.raises(IntegrityError, match="does not match its sha256"):
        Transformers(**params).bind(tampered.get)
    with pytest.raises(ConfigError, match="imported with transformers 4.0.0"):
        Transformers(**{**params, "transformers": "4.0.0"}).bind(read.get)
    with pytest.raises(ConfigError, match="at most 64 positions"):
        Transformers(**{**params, "context": 65}).bind(read.get)
    with pytest.raises(UsageError, match="no model files"):
        Transformers(**params).genesis()


@pytest.mark.parametrize(("patch", "needle"), [
    ({"attn_implementation": "kernels-community/flash-attn"}, "is not a built-in attention"),
    ({"_attn_implementation": "org/kernel"}, "is not a built-in attention"),
    ({"text_config": {"auto_map": {"AutoModel": "evil.Model"}}}, "'auto_map' loads code"),
    ({"trust_remote_code": True}, "'trust_remote_code' loads code"),
    ({"nested": [{"use_kernels": True}]}, "'use_kernels' loads code"),
])
def test_refuses_config_fields_that_load_code_and_forces_offline(gpt2_dir, monkeypatch, patch, needle):
    """Issue 25: an attn_implementation naming a Hub kernel passed the check (transformers reached for remote
    kernel code), and so did a nested auto_map; HF_HUB_OFFLINE was only defaulted."""
    from woolf.workloads.hf.modeldir import build_config

    cfg = {**json.loads((gpt2_dir / "config.json").read_text()), **patch}
    with pytest.raises(UsageError, match=needle):
        build_config(json.dumps(cfg).encode())
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    build_config((gpt2_dir / "config.json").read_bytes())
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    ok = {**json.loads((gpt2_dir / "config.json").read_text()), "attn_implementation": "sdpa"}
    build_config(json.dumps(ok).encode())


# float32 master weights for a bf16 checkpoint: the ledger stores and merges float32, so small updates land; a
# bf16 delta is refused; a ledger that asks to keep bf16 works as before.


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
