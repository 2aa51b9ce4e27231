"""Hashing while writing (woolf/storage/writer.py): the bytes are safetensors' own and their hashes right, bit for bit."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import save_file

from woolf.storage.weights import save_atomic
from woolf.storage.writer import sha256_of, write_hashed

CASES = [
    {"w": torch.randn(3, 4), "b": torch.randn(4), "a": torch.randn(2, dtype=torch.float64)},
    {"z": torch.randn(5).to(torch.bfloat16), "y": torch.arange(7), "x": torch.tensor([True, False]),
     "e": torch.zeros(0, 3), "é": torch.randn(2, dtype=torch.float16), "i8": torch.tensor([1, -2], dtype=torch.int8)},
    {"big": torch.randn(3_000_000), "t": torch.randn(5, 3).t().contiguous()},
]


@pytest.mark.unit
@pytest.mark.parametrize("tensors", CASES)
@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])  # safetensors orders 2+ keys at random itself
def test_write_hashed_is_safetensors_bytes_and_their_hashes(tmp_path, tensors, metadata):
    save_file(tensors, tmp_path / "ref", metadata=metadata)
    md5, sha = write_hashed(tensors, tmp_path / "ours", metadata=metadata)
    ref = (tmp_path / "ref").read_bytes()
    assert (tmp_path / "ours").read_bytes() == ref
    assert (md5, sha) == (hashlib.md5(ref).hexdigest(), hashlib.sha256(ref).hexdigest())
    assert sha256_of(tensors, metadata) == sha
    assert save_atomic(tensors, tmp_path / "atomic", metadata=metadata, durable=False, hashed=True) == (md5, sha)
    assert (tmp_path / "atomic").read_bytes() == ref
