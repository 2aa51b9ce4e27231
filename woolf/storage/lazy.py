"""A safetensors file read one tensor at a time: a delta that is never whole in memory.

Usage (the validator's delta, woolf/validator/delta_load.py; a merged one, woolf/ledger/transition.py):
    delta = LazyTensors.open(path, limits, expect=model_spec, label="delta")  # header checked now
    delta["layer0.weight"]      # read from the file into fresh memory on each access (nothing kept)
    norm(delta); content_sha256(delta)   # any code that iterates a dict of tensors works unchanged
    delta.clip(scale)           # later reads come back times ``scale`` (scores.clip_delta's arithmetic)
    delta.dtype_of(name)        # from the header, no read

Bytes only: how a delta is merged (in place, tensor by tensor) is ledger/transition.py's.

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

from woolf.core.scale import f32
from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.header import header
from woolf.storage.weights import compare_spec, torch_alloc, torch_dtypes


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
        t, view = torch_alloc(dtype, shape)
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
