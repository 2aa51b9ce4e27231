"""`woolf train --nproc N` in one process: bad --nproc values and a device out of memory are refused in
one line each; training in place holds one model. The runs on two gloo processes (the result where
one process ends, a rank that dies mid-run) are in tests/e2e/test_distributed.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from tests.conftest import run_cli  # noqa: E402
from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
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
