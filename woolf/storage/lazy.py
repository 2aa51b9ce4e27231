"""A safetensors file read one tensor at a time: a delta that is never whole in memory.

Usage (the validator's delta, woolf/validator/delta_load.py; a merged one, woolf/ledger/transition.py):
    delta = LazyTensors.open(path, limits, expect=model_spec, label="delta")  # header checked now
    delta["layer0.weight"]      # read from the file into fresh memory on each access (nothing kept)
    buf = delta.scratch(); t = delta.read_into("layer0.weight", buf)   # into one reused buffer instead
    norm(delta); content_sha256(delta)   # any code that iterates a dict of tensors works unchanged
    delta.clip(scale)           # later reads come back times ``scale`` (scores.clip_delta's arithmetic)
    delta.dtype_of(name)        # from the header, no read
    content = read_hashed(path, limits, on_block)   # every byte to on_block, and the tensors' content sha256

``read_hashed`` is the one pass over a dense delta's bytes: storage's md5 and sha256 of
the file (``on_block``, storage/dvcstore.py fetch_object) and core.scores.content_sha256 of its
tensors (the replay check's) from the same read, when the file keeps its tensors in name order
(safetensors' writers do, for tensors of one dtype); else the content is hashed on its own later.

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

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from woolf.core.scale import f32
from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.files import hash_pool
from woolf.storage.header import header
from woolf.storage.weights import compare_spec, torch_alloc, torch_dtypes


class LazyTensors(Mapping):
    """{name: tensor} over a checked safetensors file; every access reads the tensor again."""

    def __init__(self, path: Path, spec: dict, offsets: dict, start: int, label: str, fh):
        self.path, self.spec, self._offsets, self._start, self.label = Path(path), spec, offsets, start, label
        self._fh = fh
        self.scale: float | None = None
        self.content: str | None = None  # core.scores.content_sha256 of its tensors, when read_hashed made it
        # storage/pending.py PendingObject: its hashes still being computed (validator/delta_load.py)
        self.pending = None
        self.declared_sha256: str | None = None  # what the pending sha256 must be

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
        return self._clipped(self.raw(name))

    def _clipped(self, t):
        if self.scale is None or not t.is_floating_point():
            return t
        s = torch.tensor(f32(self.scale), dtype=torch.float32)
        if t.dtype == torch.float32:  # clip_delta's one rounded multiply, into the tensor's own memory
            return torch.mul(t, s, out=t)
        return torch.mul(t.to(torch.float32), s).to(t.dtype).contiguous()

    def scratch(self):
        """A buffer of the largest tensor's bytes for ``read_into``: one tensor's memory, reused:
        a fresh 128 MiB tensor per read costs its page faults, ~1.3 s per GB on this VM, as much as the read."""
        return torch.empty(max((e - b for b, e in self._offsets.values()), default=0), dtype=torch.uint8)

    def read_into(self, name: str, buf):
        """``self[name]``, the same values, read into ``buf`` (``scratch()``): valid until the next read into
        it. A clipped tensor of another float dtype than float32 comes back in fresh memory, as from ``[]``."""
        dtype, shape = self.spec[name]
        begin, end = self._offsets[name]
        t = buf[:end - begin]
        self._fh.seek(self._start + begin)
        if end > begin and self._fh.readinto(memoryview(t.numpy())) != end - begin:
            raise InvalidWeightsError(f"{self.label}: the file changed while it was read")
        return self._clipped(t.view(torch_dtypes()[dtype]).view(shape))


CHUNK = 8 << 20


def _content_plan(spec: dict, offsets: dict, start: int) -> list | None:
    """[(first byte, end, prefix)] of each tensor in name order, as content_sha256 frames them; None
    when the file does not hold them in that order (then they cannot be hashed as they stream by)."""
    plan, end, names = [], 0, torch_dtypes()
    for name in sorted(spec):
        begin, stop = offsets[name]
        if begin != end:
            return None
        end = stop
        dtype, shape = spec[name]
        plan.append((start + begin, start + stop, f"{name}\0{names[dtype]}\0{tuple(shape)}\0".encode()))
    return plan


def _feed(h, plan: list, i: int, block: bytes, pos: int) -> int:
    """The part of ``block`` (at file offset ``pos``) that is tensor bytes into ``h``, each tensor's
    prefix where it begins; the index of the first tensor not finished."""
    stop, view = pos + len(block), memoryview(block)
    while i < len(plan):
        begin, end, prefix = plan[i]
        if begin >= stop:
            break
        if begin >= pos:
            h.update(prefix)
        lo, hi = max(begin, pos), min(end, stop)
        if hi > lo:
            h.update(view[lo - pos:hi - pos])
        if end > stop:
            break
        i += 1
    return i


class _Content:
    """core.scores.content_sha256 fed block by block in a helper thread (``_feed`` there): like
    storage/files.py Digests, a block must stay unchanged until the next ``update`` or ``wait``."""

    def __init__(self, plan: list):
        self.h, self.plan, self.i, self._future = hashlib.sha256(), plan, 0, None

    def wait(self) -> None:
        if self._future is not None:
            self.i, self._future = self._future.result(), None

    def update(self, block, pos: int) -> None:
        self.wait()
        self._future = hash_pool("content").submit(_feed, self.h, self.plan, self.i, block, pos)

    def hexdigest(self) -> str:
        self.wait()
        for _, _, prefix in self.plan[self.i:]:  # zero-size tensors at the very end
            self.h.update(prefix)
        return self.h.hexdigest()


def _segments(spec: dict, offsets: dict, start: int, size: int):
    """(name or None, first byte, end) covering the file in order: the header, each tensor (file order),
    any bytes between or after them."""
    pos = 0
    for name in sorted(spec, key=lambda n: offsets[n]):
        begin, end = start + offsets[name][0], start + offsets[name][1]
        if begin > pos:
            yield None, pos, begin
        yield name, begin, end
        pos = max(pos, end)
    if size > pos:
        yield None, pos, size


def read_hashed(path: Path, limits: LimitsConfig, on_block, label: str = "delta", on_tensor=None) -> str | None:
    """Every byte of ``path`` to ``on_block`` in one read, and core.scores.content_sha256 of its tensors
    from the same bytes (None: they are not in name order, or ``on_block`` is None: nothing to hash; the
    content hash runs in a helper thread). ``on_tensor(name, tensor)``: each tensor, as read, in one
    reused buffer (valid during the call; the validator's norm and sketch), in file order.
    Raises InvalidWeightsError (before any byte goes to ``on_block``) for a header that is not safetensors."""
    if on_block is None:
        return None
    spec, offsets, start, _ = header(path, limits, label)
    plan = _content_plan(spec, offsets, start)
    content = _Content(plan) if plan is not None else None
    # two buffers, used in turn: on_block may still hash a block until it is given the next one
    # (storage/files.py Digests), and no fresh memory per block (its page faults cost as much as the read)
    bufs = [bytearray(CHUNK), bytearray(CHUNK)]
    scratch = None
    if on_tensor is not None:  # one tensor's memory, reused: the largest
        scratch = torch.empty(max((e - b for b, e in offsets.values()), default=0), dtype=torch.uint8)
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        for name, begin, end in _segments(spec, offsets, start, size):
            into = None
            if name is not None and scratch is not None:
                on_block(b"")  # the blocks of the previous tensor are hashed: its buffer is free again
                if content is not None:
                    content.wait()
                into = memoryview(scratch[:end - begin].numpy())
            pos = begin
            while pos < end:
                n = min(CHUNK, end - pos)
                view = into[pos - begin:pos - begin + n] if into is not None else memoryview(bufs[0])[:n]
                got = fh.readinto(view)
                if got != n:
                    raise InvalidWeightsError(f"{label}: the file changed while it was read")
                on_block(view)
                if content is not None:
                    content.update(view, pos)
                pos += n
                bufs.reverse()
            if into is not None:
                dtype, shape = spec[name]
                on_tensor(name, scratch[:end - begin].view(torch_dtypes()[dtype]).view(shape))
        if fh.read(1):
            raise InvalidWeightsError(f"{label}: the file changed while it was read")
    on_block(b"")
    return content.hexdigest() if content is not None else None
