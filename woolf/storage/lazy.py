"""A safetensors file read one tensor at a time: a delta that is never whole in memory.

Usage (the validator's delta and the audit's, woolf/validator/step.py, woolf/audit/recompute.py):
    delta = LazyTensors.open(path, limits, expect=model_spec, label="delta")  # header checked now
    delta["layer0.weight"]      # read from the file into fresh memory on each access (nothing kept)
    norm(delta); content_sha256(delta)   # any code that iterates a dict of tensors works unchanged
    delta.clip(scale)           # later reads come back times ``scale`` (scores.clip_delta's arithmetic)
    delta.dtype_of(name)        # from the header, no read
    if streamable(rule, current, delta):
        step = merge_in_place(rule, current, delta, attenuation)   # the candidate in current's memory
    delta = open_delta(path, declared, spec, limits)   # a merged delta: dense lazily, compressed expanded
    delta = clipped(delta, scale); step = merge_delta(rule, current, state, delta, attenuation)  # audit, rebuild

The header is checked like any untrusted file's (woolf/storage/header.py) and its names,
dtypes and shapes against ``expect`` before anything is read. The file is opened once, at
``open``: the same inode is read however often a tensor is asked for (a file renamed over the
cache path meanwhile does not change what is read). The caller hashes the file (its bytes
are then what every read returns, unless someone rewrites the file in place, which only this
machine's own users can). No mmap: a mapped file's touched pages would count in the
process's resident memory until it is unmapped; here each tensor costs its own size while
the caller holds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from woolf.core.merge_rules import Rule, Step, merge_step
from woolf.core.scores import clip_delta, f32
from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.header import header
from woolf.storage.sparse import load_delta
from woolf.storage.weights import _torch_alloc, compare_spec, torch_dtypes


class LazyTensors(Mapping):
    """{name: tensor} over a checked safetensors file; every access reads the tensor again."""

    def __init__(self, path: Path, spec: dict, offsets: dict, start: int, label: str, fh):
        self.path, self.spec, self._offsets, self._start, self.label = Path(path), spec, offsets, start, label
        self._fh = fh
        self.scale: float | None = None

    @classmethod
    def open(cls, path: Path, limits: LimitsConfig, expect: dict | None = None,
             label: str = "delta") -> LazyTensors:
        fh = open(path, "rb")  # noqa: SIM115 - kept open for the mapping's life (closed by close/GC)
        try:
            spec, offsets, start, _ = header(path, limits, label)
            if os.fstat(fh.fileno()).st_size != start + max((e for _, e in offsets.values()), default=0):
                raise InvalidWeightsError(f"{label}: the file changed while it was read")
            if expect is not None:
                compare_spec(spec, expect, label)
        except BaseException:
            fh.close()
            raise
        return cls(path, spec, offsets, start, label, fh)

    def close(self) -> None:
        self._fh.close()

    def __del__(self):
        fh = getattr(self, "_fh", None)
        if fh is not None:
            fh.close()

    def __iter__(self):
        return iter(sorted(self.spec))

    def __len__(self) -> int:
        return len(self.spec)

    def __contains__(self, name) -> bool:
        return name in self.spec

    def dtype_of(self, name: str):
        return torch_dtypes()[self.spec[name][0]]

    def clip(self, scale: float) -> None:
        """Later reads return each floating tensor times ``scale``, as scores.clip_delta computes it."""
        if self.scale is not None:
            raise ValueError("a lazy delta is clipped once")
        self.scale = scale

    def raw(self, name: str):
        """The tensor as the file holds it (no clip), in fresh memory."""
        dtype, shape = self.spec[name]
        t, view = _torch_alloc(dtype, shape)
        begin, end = self._offsets[name]
        self._fh.seek(self._start + begin)
        if end > begin and self._fh.readinto(view) != end - begin:
            raise InvalidWeightsError(f"{self.label}: the file changed while it was read")
        return t

    def __getitem__(self, name: str):
        if name not in self.spec:
            raise KeyError(name)
        t = self.raw(name)
        if self.scale is None or not t.is_floating_point():
            return t
        s = torch.tensor(f32(self.scale), dtype=torch.float32)
        if t.dtype == torch.float32:  # clip_delta's one rounded multiply, into the tensor's own memory
            return torch.mul(t, s, out=t)
        return torch.mul(t.to(torch.float32), s).to(t.dtype).contiguous()


def streamable(rule: Rule, current: dict, delta) -> bool:
    """The attenuated rule on float32 weights with a lazily read float32 delta: ``merge_in_place`` applies."""
    return (rule.kind == "attenuated" and isinstance(delta, LazyTensors) and set(current) == set(delta)
            and all(v.dtype == torch.float32 and v.is_contiguous() and delta.dtype_of(k) == torch.float32
                    for k, v in current.items()))


def merge_in_place(rule: Rule, current: dict, delta: LazyTensors, attenuation: float) -> Step:
    """merge_step's Step, one tensor at a time: each delta tensor, read into fresh memory, receives
    ``current + scale * delta`` (merge_step's own arithmetic, called per tensor: the same bits) and
    replaces current's tensor, which is freed. ``current`` becomes the candidate; peak memory is the
    weights and one tensor beside them (validator and audit alike)."""
    scale = 0.0
    for name in sorted(current):
        one = merge_step(rule, {name: current[name]}, None, {name: delta[name]}, attenuation, reuse_delta=True)
        current[name], scale = one.candidate[name], one.scale
    return Step(current, None, current, True, scale)


def open_delta(path: Path, declared: dict, spec: dict, limits: LimitsConfig, label: str = "delta"):
    """A delta file to merge: a dense one read tensor by tensor (LazyTensors), a compressed one expanded
    (storage/sparse.py load_delta)."""
    if declared.get("kind") == "dense":
        return LazyTensors.open(path, limits, expect=spec, label=label)
    return load_delta(path, declared, spec, limits, label)


def clipped(delta, scale: float):
    """``delta`` times ``scale`` as scores.clip_delta computes it: a lazy delta's later reads, else a copy."""
    if isinstance(delta, LazyTensors):
        delta.clip(scale)
        return delta
    return clip_delta(delta, scale)


def merge_delta(rule: Rule, current: dict, state, delta, attenuation: float) -> Step:
    """merge_in_place where it applies (no outer state, a streamable delta), else merge_step writing into the
    delta's memory: the same bits either way; ``current`` and ``delta`` are not to be used afterwards."""
    if state is None and streamable(rule, current, delta):
        return merge_in_place(rule, current, delta, attenuation)
    return merge_step(rule, current, state, delta, attenuation, reuse_delta=True)
