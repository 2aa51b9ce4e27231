"""storage/lazy.py: a delta read tensor by tensor gives the whole-model path's merge, bit for bit."""

from __future__ import annotations

import hashlib
import os

import pytest
import torch
from safetensors.torch import save_file

from woolf.core.merge_rules import Rule, merge_step
from woolf.core.scores import clip_delta, content_sha256, norm, similarity
from woolf.errors import InvalidWeightsError
from woolf.ledger.transition import merge_in_place, streamable
from woolf.protocol.config import LimitsConfig
from woolf.storage.lazy import LazyTensors
from woolf.storage.weights import load_checked, spec_of
from woolf.storage.writer import sha256_of

pytestmark = pytest.mark.unit

LIMITS = LimitsConfig()


def _model(seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return {f"w{i}": torch.randn(n, generator=g) * scale for i, n in enumerate((1000, 37, 5000, 1))}


def _file(tmp_path, tensors, name="delta.safetensors"):
    path = tmp_path / name
    save_file(tensors, str(path))
    return path


@pytest.mark.parametrize("att,clip", [(1.0, None), (0.5, None), (0.3333, None), (0.7, 0.123456)])
def test_the_streamed_merge_is_bit_for_bit_merge_step(tmp_path, att, clip):
    current, delta = _model(0), _model(1, 1e-3)
    path = _file(tmp_path, delta)
    rule = Rule.from_record("attenuated", 0.9, None)
    whole = clip_delta(delta, clip) if clip is not None else delta
    want = merge_step(rule, current, None, {k: v.clone() for k, v in whole.items()}, att).candidate
    lazy = LazyTensors.open(path, LIMITS, expect=spec_of(current))
    if clip is not None:
        lazy.clip(clip)
        assert all(torch.equal(lazy[k], whole[k]) for k in whole)  # clip_delta's one rounding
    assert streamable(rule, current, lazy)
    step = merge_in_place(rule, current, lazy, att)
    assert step.candidate is current and step.probe is current and step.applied
    assert step.scale == merge_step(rule, _model(0), None, _model(1, 1e-3), att).scale
    assert all(torch.equal(step.candidate[k], want[k]) for k in want)
    assert sha256_of(step.candidate) == sha256_of(want)


def test_lazy_reads_are_the_file_and_feed_the_screen_alike(tmp_path):
    delta = _model(2, 1e-2)
    path = _file(tmp_path, delta)
    lazy = LazyTensors.open(path, LIMITS, expect=spec_of(delta))
    loaded = load_checked(path, LIMITS)
    assert list(lazy) == sorted(delta) and len(lazy) == len(delta) and "w0" in lazy and "x" not in lazy
    assert all(torch.equal(lazy[k], loaded[k]) for k in loaded)
    assert lazy["w0"] is not lazy["w0"]  # fresh memory on every read: nothing is kept
    assert norm(lazy) == norm(loaded) and content_sha256(lazy) == content_sha256(loaded)
    other = _model(3, 1e-2)
    assert similarity(lazy, other, 0.9) == similarity(loaded, other, 0.9)
    assert lazy.dtype_of("w1") == torch.float32
    with pytest.raises(ValueError, match="clipped once"):
        lazy.clip(0.5)
        lazy.clip(0.5)


def test_a_file_that_is_not_the_model_is_refused_at_open(tmp_path):
    current = _model(0)
    wrong = dict(current, w1=torch.zeros(38))
    with pytest.raises(InvalidWeightsError, match="delta: tensor 'w1' is F32\\[38\\]"):
        LazyTensors.open(_file(tmp_path, wrong), LIMITS, expect=spec_of(current))
    bf16 = {k: v.to(torch.bfloat16) for k, v in current.items()}
    with pytest.raises(InvalidWeightsError, match="keeps float32 master weights"):
        LazyTensors.open(_file(tmp_path, bf16, "b.safetensors"), LIMITS, expect=spec_of(current))
    path = _file(tmp_path, current, "t.safetensors")
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) - 4)
    with pytest.raises(InvalidWeightsError, match="delta: "):
        LazyTensors.open(path, LIMITS, expect=spec_of(current))


def test_other_rules_and_dtypes_are_not_streamed(tmp_path):
    current = _model(0)
    path = _file(tmp_path, _model(1, 1e-3))
    lazy = LazyTensors.open(path, LIMITS, expect=spec_of(current))
    assert not streamable(Rule.from_record("nesterov", 1.0, {"outer_lr": 0.7, "momentum": 0.9}), current, lazy)
    assert not streamable(Rule.from_record("attenuated", 1.0, None), current, load_checked(path, LIMITS))
    half = {k: v.double() for k, v in current.items()}
    assert not streamable(Rule.from_record("attenuated", 1.0, None), half, lazy)


def test_a_file_cut_short_or_replaced_after_open_is_never_read_as_other_bytes(tmp_path):
    """Hostile storage: the cached object is truncated in place after it was opened and hashed (a read would
    come up short: refused, never zero-filled), or a file is renamed over its path (the opened inode is read)."""
    delta = _model(4, 1e-2)
    path = _file(tmp_path, delta)
    lazy = LazyTensors.open(path, LIMITS, expect=spec_of(delta))
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(InvalidWeightsError, match="changed while it was read"):
        [lazy[k] for k in sorted(delta)]
    path = _file(tmp_path, delta, "second.safetensors")
    lazy = LazyTensors.open(path, LIMITS, expect=spec_of(delta))
    os.replace(_file(tmp_path, _model(5, 1e-2), "planted.safetensors"), path)
    assert all(torch.equal(lazy[k], delta[k]) for k in delta)  # what was opened (and hashed), not the plant


@pytest.mark.unit
@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_read_hashed_gives_the_files_bytes_and_the_content_hash_in_one_read(tmp_path, monkeypatch, chunk):
    """issue 35: the replay check's content sha256 comes from the read that hashes the file: the same
    value as content_sha256 whatever the chunking (tensors across chunks, empty and scalar tensors);
    None when the file does not keep its tensors in name order (the screen then hashes them itself)."""

    import woolf.storage.lazy as lazy
    from woolf.storage.lazy import read_hashed

    monkeypatch.setattr(lazy, "CHUNK", chunk)
    g = torch.Generator().manual_seed(3)
    tensors = {"a.w": torch.randn(33, 5, generator=g), "b": torch.zeros(0), "c": torch.tensor(2.5),
               "d.bias": torch.randn(17, generator=g), "zz": torch.zeros(0, 3)}
    path = tmp_path / "d.safetensors"
    save_file(tensors, str(path))
    seen = hashlib.sha256()
    content = read_hashed(path, LIMITS, seen.update)
    assert seen.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()  # every byte, in order
    assert content == content_sha256(tensors) == content_sha256(LazyTensors.open(path, LIMITS))
    mixed = {"a": torch.randn(4, generator=g).to(torch.float16), "b": torch.randn(4, generator=g)}
    save_file(mixed, str(path))  # safetensors puts the float32 tensor first: not name order
    assert read_hashed(path, LIMITS, lambda b: None) is None
    assert read_hashed(path, LIMITS, None) is None  # nothing to hash: not read at all
    path.write_bytes(b"\xff" * 16)
    with pytest.raises(InvalidWeightsError):
        read_hashed(path, LIMITS, lambda b: None)


@pytest.mark.parametrize("clip", [None, 0.123456])
def test_reads_into_one_reused_buffer_are_the_fresh_reads(tmp_path, clip):
    """Issue 35: read_into (the screen's norm and sketch, the streamed merge) returns what [] returns."""
    delta = {**_model(4, 1e-2), "h": torch.randn(7, 3).to(torch.bfloat16), "n": torch.arange(5)}
    lazy = LazyTensors.open(_file(tmp_path, delta), LIMITS, expect=spec_of(delta))
    if clip is not None:
        lazy.clip(clip)
    buf = lazy.scratch()
    assert buf.numel() == max(t.numel() * t.element_size() for t in delta.values())
    for name in lazy:
        got = lazy.read_into(name, buf)
        assert got.dtype == delta[name].dtype and got.shape == delta[name].shape
        assert torch.equal(got, lazy[name])


def test_read_hashed_hands_each_tensor_as_read_in_one_buffer(tmp_path, monkeypatch):
    """Issue 35: the validator's norm and sketch come from the read that hashes the delta (on_tensor)."""
    import woolf.storage.lazy as lazy
    from woolf.storage.lazy import read_hashed

    monkeypatch.setattr(lazy, "CHUNK", 64)
    g = torch.Generator().manual_seed(5)
    tensors = {"a": torch.randn(40, 3, generator=g), "b": torch.zeros(0), "c": torch.randn(7, generator=g),
               "d": torch.tensor(1.5)}
    path = _file(tmp_path, tensors)
    seen, got, ptrs = hashlib.sha256(), {}, set()

    def on_tensor(name, t):
        ptrs.add(t.data_ptr() if t.numel() else None)
        got[name] = t.clone()

    content = read_hashed(path, LIMITS, seen.update, on_tensor=on_tensor)
    assert seen.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert content == content_sha256(tensors)
    assert set(got) == set(tensors) and all(torch.equal(got[k], tensors[k]) for k in tensors)
    assert len(ptrs - {None}) == 1  # one buffer for all of them
