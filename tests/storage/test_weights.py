"""Safetensors parsing of hostile files: each refused with its own clear reason."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch
from safetensors.torch import save_file

from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.weights import load_checked, read_spec, save_atomic, spec_of

pytestmark = pytest.mark.unit

LIMITS = LimitsConfig()
GOOD = {"w": torch.ones(4, 4), "b": torch.zeros(4)}


@pytest.fixture
def good(tmp_path):
    p = tmp_path / "good.safetensors"
    save_file(GOOD, p)
    return p


def _raw_header(path, header: dict, data: bytes = b""):
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def test_good_file_loads(good):
    assert torch.equal(load_checked(good, LIMITS, expect=spec_of(GOOD))["w"], GOOD["w"])


@pytest.mark.parametrize("case,needle", [
    ("truncated", "header length"),
    ("tiny", "truncated file"),
    ("bomb", "header length"),
    ("pickle", "header length"),
    ("not_json", "not valid JSON"),
    ("offsets", "offsets outside the file"),
    ("dtype", "unsupported dtype"),
])
def test_malformed_files(tmp_path, good, case, needle):
    p = tmp_path / "bad.safetensors"
    if case == "truncated":
        p.write_bytes(good.read_bytes()[:40])
    elif case == "tiny":
        p.write_bytes(b"abc")
    elif case == "bomb":
        p.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    elif case == "pickle":
        p.write_bytes(pickle.dumps({"w": [1.0] * 100}))
    elif case == "not_json":
        p.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{]")
    elif case == "offsets":
        _raw_header(p, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8)
    elif case == "dtype":
        _raw_header(p, {"w": {"dtype": "X99", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
    with pytest.raises(InvalidWeightsError) as err:
        load_checked(p, LIMITS)
    assert needle in str(err.value)


def test_header_with_100k_entries(tmp_path):
    header = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(100_000)}
    p = _raw_header(tmp_path / "many.safetensors", header)
    with pytest.raises(InvalidWeightsError, match="(tensors, over the limit|header length)"):
        read_spec(p, LIMITS)


@pytest.mark.parametrize("mutate,needle", [
    (lambda t: {**t, "w": t["w"].double()}, "the model has F32"),
    (lambda t: {**t, "w": torch.ones(5, 4)}, "the model has F32[4, 4]"),
    (lambda t: {"w": t["w"]}, "missing tensors ['b']"),
    (lambda t: {**t, "extra": torch.ones(1)}, "unexpected tensors ['extra']"),
    (lambda t: {**t, "w": torch.full((4, 4), float("nan"))}, "NaN or Inf"),
    (lambda t: {**t, "b": torch.tensor([1.0, float("inf"), 0.0, 0.0])}, "NaN or Inf"),
])
def test_wrong_model_or_values(tmp_path, mutate, needle):
    p = tmp_path / "x.safetensors"
    save_file(mutate(dict(GOOD)), p)
    with pytest.raises(InvalidWeightsError) as err:
        load_checked(p, LIMITS, expect=spec_of(GOOD))
    assert needle in str(err.value)


def test_size_limit(good):
    with pytest.raises(InvalidWeightsError, match="over the ledger's limit"):
        read_spec(good, LimitsConfig(max_delta_bytes=10))


def test_save_atomic_leaves_no_temp_and_replaces(tmp_path):
    p = tmp_path / "w.safetensors"
    save_atomic(GOOD, p)
    save_atomic({"w": torch.zeros(2)}, p)
    assert [x.name for x in tmp_path.iterdir()] == ["w.safetensors"]
    assert read_spec(p, LIMITS) == {"w": ("F32", (2,))}
