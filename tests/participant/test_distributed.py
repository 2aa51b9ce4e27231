"""`woolf train --nproc N` and `torchrun -m woolf train`: the transformers workload on two gloo processes.

Two CPU processes share each global batch (each takes half its rows); the result must be where
one process ends (cosine of the deltas >= 0.999, norms within 1%). A rank that dies mid-run
stops the others and nothing is kept; bad --nproc values and a device out of memory are refused
in one line each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("transformers")

from tests.conftest import run_cli  # noqa: E402
from tests.workloads.test_hf import hf_network, tiny  # noqa: E402
from woolf.errors import TrainingFailed, UsageError  # noqa: E402
from woolf.participant.distributed import check_nproc  # noqa: E402
from woolf.workloads.hf import Transformers  # noqa: E402

CPU = {"WOOLF_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def still_model(tmp_path_factory) -> Path:
    """A tiny GPT-2 with no dropout: one process and two draw no random masks that could differ."""
    out = tiny.make_tiny_model(tmp_path_factory.mktemp("models") / "gpt2")
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def _delta(clone: Path, base: dict) -> torch.Tensor:
    trained = load_file(clone / ".woolf/work/trained.safetensors")
    return torch.cat([(trained[k] - base[k]).flatten() for k in sorted(base)])


def _close(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    cos = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    return cos, float(b.norm() / a.norm())


def test_bad_nproc_is_refused_in_one_line():
    with pytest.raises(UsageError, match="--nproc 0: at least one process"):
        check_nproc(0, "cpu")
    if torch.cuda.device_count() < 2:  # more processes than CUDA devices
        with pytest.raises(UsageError, match=r"--nproc 2: this machine has \d CUDA device"):
            check_nproc(2, "cuda")


def test_cli_refuses_nproc_zero(tmp_path):
    proc = run_cli("train", "--nproc", "0", cwd=tmp_path, env=CPU)
    assert proc.returncode == 2 and "'--nproc': 0 is not in the range x>=1" in proc.stderr


def test_out_of_memory_is_one_line_with_the_peak_and_what_to_lower(tmp_path, still_model):
    net = hf_network(tmp_path, still_model)
    wl = net.work.workload()
    wl.batch_size = 2**40  # the batch's row offsets alone cannot be allocated
    w0 = net.work.load_weights(net.work.head())
    with pytest.raises(TrainingFailed) as err:
        wl.train(w0, wl.default_data("alice", 0), steps=1)
    text = str(err.value)
    assert text.count("\n") == 1  # the message, then its hint
    assert "out of memory training on cpu at a peak of" in text and "GiB of RSS" in text
    assert "batch_size" in text and "checkpointing" in text


def test_in_place_training_writes_the_given_tensors_and_keeps_ties(tmp_path, still_model):
    """One model in memory: trained in place, the caller's tensors are the result; a copy otherwise."""
    net = hf_network(tmp_path, still_model)
    wl: Transformers = net.work.workload()
    w0 = net.work.load_weights(net.work.head())
    keep = {k: v.clone() for k, v in w0.items()}
    copied, _ = wl.train(w0, wl.default_data("alice", 0), steps=2)
    assert all(torch.equal(w0[k], keep[k]) for k in w0)  # not in place: the base is untouched
    same, _ = wl.train(w0, wl.default_data("alice", 0), steps=2, in_place=True)
    assert all(same[k].data_ptr() == w0[k].data_ptr() for k in w0)
    assert all(torch.equal(same[k], copied[k]) for k in w0)  # the same training, either way
    model = wl.model()
    assert model.lm_head.weight is model.transformer.wte.weight  # still tied


@pytest.mark.slow
def test_two_gloo_processes_end_where_one_does(tmp_path, still_model):
    """--nproc 2 (DDP), torchrun by hand, and FSDP2 (WOOLF_FSDP=1) each end where one process does."""
    net = hf_network(tmp_path, still_model)
    base = net.work.load_weights(net.work.head())
    data = tmp_path / "text.txt"
    data.write_bytes((Path(json.__file__).read_bytes() + Path(torch.__file__).read_bytes()) * 2)
    one, two, by_hand, sharded = net.clone("alice"), net.clone("bob"), net.clone("carol"), net.clone("dave")
    args = ("train", "--steps", "4", "--device", "cpu", "--data", str(data), "--json")
    single = run_cli(*args, cwd=one.root, env=CPU)
    assert single.returncode == 0, single.stderr[-3000:]
    double = run_cli(*args, "--nproc", "2", cwd=two.root, env=CPU, timeout=900)
    assert double.returncode == 0, double.stderr[-3000:]
    assert json.loads(double.stdout)["training"]["processes"] == 2  # rank 0 alone printed the result
    torchrun = run_cli_torchrun(*args, cwd=by_hand.root)
    assert torchrun.returncode == 0, torchrun.stderr[-3000:]
    fsdp = run_cli(*args, "--nproc", "2", cwd=sharded.root, env={**CPU, "WOOLF_FSDP": "1"}, timeout=900)
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    assert json.loads(fsdp.stdout)["training"]["sharded"] is True  # FSDP2: each rank held half the model
    d1 = _delta(one.root, base)
    for clone in (two, by_hand, sharded):
        cos, ratio = _close(d1, _delta(clone.root, base))
        assert cos >= 0.999 and abs(ratio - 1) <= 0.01, (clone.root.name, cos, ratio)


def run_cli_torchrun(*args: str, cwd: Path):
    import os
    import subprocess

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "woolf", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, **CPU}, timeout=900)


@pytest.mark.slow
def test_a_rank_that_dies_stops_the_others_and_nothing_is_kept(tmp_path, still_model):
    net = hf_network(tmp_path, still_model)
    alice = net.clone("alice")
    proc = run_cli("train", "--steps", "4", "--device", "cpu", "--nproc", "2", cwd=alice.root,
                   env={**CPU, "WOOLF_TEST_RANK_EXIT": "1:2"}, timeout=900)
    assert proc.returncode == 1
    assert "training process rank 1 of 2 exited with status 3" in proc.stderr
    assert "nothing from this run was saved or submitted" in proc.stderr
    assert not (alice.root / ".woolf/work/trained.safetensors").exists()
    assert not (alice.root / ".woolf/work/trained.json").exists()
