"""The transformers workload on CUDA: train, evaluate and validate there, and how far a version's
metrics on CUDA are from the CPU's (what `validators.epsilon` must allow). Skipped without a GPU;
benchmarks/gpu_check.py measures throughput and memory at 100M-1B parameters."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
from woolf.participant import (
    SubmitOptions,
    TrainOptions,
    train,  # noqa: E402
)
from woolf.validator import Validator  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny.make_tiny_model(tmp_path_factory.mktemp("cuda") / "gpt2", dtype="bfloat16")


def test_train_and_evaluate_on_cuda_match_the_cpu_within_epsilon(tmp_path, model_dir):
    net = hf_network(tmp_path, model_dir, **{"workload.params.autocast": "bf16"})
    wl, bench = net.work.workload(), net.work.benchmark()
    w0 = net.work.load_weights(net.work.show(0))
    out, summary = wl.train(w0, wl.default_data("alice", 0), steps=2, device="cuda")
    assert summary["device"] == "cuda" and summary["autocast"] == "bfloat16"
    assert all(v.device.type == "cpu" and v.dtype == torch.float32 and torch.isfinite(v).all() for v in out.values())
    assert any(not torch.equal(out[k], w0[k]) for k in w0)
    cpu, gpu = wl.evaluate(out, bench, "cpu"), wl.evaluate(out, bench, "cuda")
    diff = abs(cpu["loss"] - gpu["loss"])
    print(f"\nCPU-vs-CUDA loss difference: {diff:.3g} nats (validators.epsilon default 1e-3)")
    assert math.isfinite(gpu["loss"]) and diff <= net.work.config.validators.epsilon
    assert wl.evaluate(out, bench, "cuda") == gpu  # deterministic on the device, run to run


def test_validate_on_cuda_merges_and_records_the_device(tmp_path, model_dir):
    net = hf_network(tmp_path, model_dir)
    alice, val = net.clone("alice"), net.clone("val")
    train(alice, TrainOptions(steps=2, contributor="alice", device="cuda"))
    from woolf.participant import submit

    submit(alice, SubmitOptions(contributor="alice"))
    (verdict,) = Validator(val, device="cuda").run()
    assert verdict.state == "merged" and verdict.device.startswith("cuda:")
    v1 = val.show(1)
    cpu = val.workload().evaluate(val.load_weights(v1), val.benchmark(), "cpu")
    assert abs(cpu["loss"] - v1.metrics["loss"]) <= val.config.validators.epsilon
