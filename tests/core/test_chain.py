"""Canonical digests of training state (woolf/core/chain.py): what a proof of training commits to."""

from __future__ import annotations

import pytest
import torch

from woolf.core.chain import component_digest, digests, relative_distance, split_components, tensor_digest
from woolf.protocol.proof import EMPTY

pytestmark = pytest.mark.unit


def test_a_tensors_digest_names_its_dtype_shape_and_bytes():
    t = torch.arange(6, dtype=torch.float32)
    assert tensor_digest(t) == tensor_digest(t.clone())
    assert tensor_digest(t) != tensor_digest(t.view(2, 3))  # the same bytes, another shape
    assert tensor_digest(t) != tensor_digest(t.to(torch.float64))
    assert tensor_digest(t.view(2, 3).t()) == tensor_digest(t.view(2, 3).t().contiguous())  # values, not strides
    u = t.clone()
    u[3] = torch.nextafter(u[3], torch.tensor(10.0))  # one ulp
    assert tensor_digest(u) != tensor_digest(t)
    assert tensor_digest(torch.tensor(2.0)) != tensor_digest(torch.tensor([2.0]))  # 0-d is not 1-d
    assert tensor_digest(torch.zeros(0)) == tensor_digest(torch.zeros(0))


def test_a_components_digest_is_its_names_and_tensors_in_name_order():
    a, b = torch.ones(2), torch.zeros(3)
    assert component_digest({"a": a, "b": b}) == component_digest({"b": b, "a": a})
    assert component_digest({"a": a, "b": b}) != component_digest({"a": b, "b": a})
    assert component_digest({"a": a}) != component_digest({"c": a})
    assert component_digest({}) == EMPTY  # a fresh optimizer's state: protocol/proof.py knows it without torch


def test_a_flat_state_splits_by_its_first_name_part():
    state = {"params/w": torch.ones(1), "opt/exp_avg/w": torch.zeros(1), "data": torch.zeros(2, dtype=torch.uint8),
             "rng/r0/cpu": torch.zeros(3, dtype=torch.uint8)}
    parts = split_components(state)
    assert set(parts) == {"params", "opt", "data", "rng"}
    assert set(parts["opt"]) == {"exp_avg/w"} and set(parts["data"]) == {"data"}
    d = digests(state, ("params", "opt", "data", "rng", "residual"))
    assert d["residual"] == EMPTY and d["params"] == component_digest({"w": torch.ones(1)})


def test_relative_distance_against_the_segments_movement():
    origin, b = {"w": torch.zeros(4)}, {"w": torch.ones(4)}
    assert relative_distance(b, b, origin) == 0.0
    assert relative_distance({"w": torch.ones(4) * 1.1}, b, origin) == pytest.approx(0.1)
    assert relative_distance({"v": torch.ones(4)}, b, origin) == float("inf")
