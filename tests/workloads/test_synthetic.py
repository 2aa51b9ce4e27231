"""The synthetic workload trains in the weights' own memory, to the values it computed out of place."""

from __future__ import annotations

import pytest
import torch

from woolf.workloads.synthetic import Synthetic

pytestmark = pytest.mark.unit


def _out_of_place(wl, weights, data, steps, seed):
    """What train computed before it trained in place (a second model beside the weights)."""
    import hashlib

    key = int.from_bytes(hashlib.sha256(data.texts[0] + bytes([seed % 256])).digest()[:4], "little")
    g = torch.Generator().manual_seed(key)
    full = wl.genesis(1)
    return {k: v + wl.step_size * steps * (full[k] - v) + 1e-4 * torch.randn(v.shape, generator=g)
            for k, v in weights.items()}


@pytest.mark.parametrize("reverse", [False, True])
def test_train_writes_the_same_values_into_the_given_tensors(reverse):
    wl = Synthetic(n_params=100_003, n_tensors=4)
    data = wl.default_data("alice", 3)
    weights = wl.genesis(0)
    if reverse:  # not the model's order: the target is built whole, the values are the same
        weights = dict(reversed(list(weights.items())))
    want = _out_of_place(wl, {k: v.clone() for k, v in weights.items()}, data, 7, 5)
    memory = {k: v.data_ptr() for k, v in weights.items()}
    trained, summary = wl.train(weights, data, steps=7, seed=5)
    assert trained is weights and summary["steps"] == 7
    assert {k: v.data_ptr() for k, v in trained.items()} == memory  # no second model
    assert all(torch.equal(trained[k], want[k]) for k in want)
    assert wl.evaluate(trained, wl.benchmark_bytes())["loss"] < wl.evaluate(wl.genesis(0), b"")["loss"]
