"""Proof of training across devices: a PR trained on CUDA is audited on the CPU, and the reverse; another
device class, so the validator asks for the audited segments' end states too and compares under
validators.retrain_tolerance. Skipped without a GPU (written, not run yet: no GPU was lent);
benchmarks/gpu_check.py (retrain_devices.py) measures the per-segment distances."""

from __future__ import annotations

import pytest
import torch

from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.participant.prove import prove_once
from woolf.validator import Validator

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("trained_on, audited_on", [("cuda", "cpu"), ("cpu", "cuda"), ("cuda", "cuda")])
def test_a_pr_trained_on_one_device_is_audited_on_another(make_net, trained_on, audited_on):
    net = make_net(**{"validators.retrain_rate": "1", "policy.min_improvement": "-10"})
    alice, val = net.clone("alice"), net.clone("val")
    for seed in (0, 1):  # fresh, then carried optimizer state
        train(alice, TrainOptions(steps=20, contributor="alice", seed=seed, device=trained_on))
        submit(alice, SubmitOptions(contributor="alice"))
        assert Validator(val, device=audited_on, name="v1").run() == []  # challenged
        prove_once(alice)
        [v] = Validator(val, device=audited_on, name="v1").run()
        print(f"\n{trained_on} -> {audited_on}: {v.retrain}")
        assert v.state == "merged", v.reason
        assert v.retrain["retrain"] == "matched"
        assert v.retrain["class"] == ("same" if trained_on == audited_on else "other")
