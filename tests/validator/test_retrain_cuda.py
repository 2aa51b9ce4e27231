"""Re-training across devices (issue 34): a PR trained on CUDA matches its re-training on the CPU, and the
reverse, under validators.retrain_tolerance. Skipped without a GPU (not run yet: no GPU was lent);
benchmarks/gpu_check.py (retrain_devices.py) measures the distances."""

from __future__ import annotations

import pytest
import torch

from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.validator import Validator

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("trained_on, retrained_on", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_recipe_trained_on_one_device_matches_its_retraining_on_the_other(make_net, trained_on, retrained_on):
    net = make_net(**{"validators.retrain_rate": "1", "policy.min_improvement": "-10"})
    alice, val = net.clone("alice"), net.clone("val")
    for seed in (0, 1):  # fresh, then carried optimizer state
        train(alice, TrainOptions(steps=20, contributor="alice", seed=seed, device=trained_on))
        submit(alice, SubmitOptions(contributor="alice"))
        [v] = Validator(val, device=retrained_on, name="v1").run()
        print(f"\n{trained_on} -> {retrained_on}: distance {v.retrain.get('distance')}")
        assert v.state == "merged", v.reason
        assert v.retrain["retrain"] == "matched" and v.retrain["distance"] <= v.retrain["tolerance"]
