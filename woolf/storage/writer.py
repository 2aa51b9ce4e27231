"""Write a safetensors file and hash it on the way out: md5 (DVC's address) and sha256 with no re-read.

Usage:
    md5, sha = write_hashed(tensors, path, metadata=None)   # path is written whole (caller renames)
    write_hashed(tensors, path, stop=event)                  # Stopped between slices once event is set
    md5, sha = write_stream({name: (dtype, shape)}, produce, path)   # produce(name) -> array, one at a time
    sha = sha256_of(tensors)                                # the same file's sha256, nothing written
    h = sha256_hasher(tensors); h.update(more)              # the same, then more bytes

The bytes are exactly ``safetensors.torch.save_file``'s (tests compare): the
header's tensor order and key layout are taken from safetensors itself, by
saving one-element stand-ins with the same names and dtypes, then given the
real shapes and offsets. Tensor data is written from the tensors' own memory
in 16 MiB slices; md5 and sha256 run in helper threads beside the write.
Tensors are torch tensors or numpy arrays (all of one kind; numpy needs no torch).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from pathlib import Path

import numpy as np

from woolf.storage.files import Digests

CHUNK = 16 << 20


class Stopped(Exception):
    """The write was asked to stop (``stop`` set) before it was done: the file is not whole."""


def _probe(tensors: dict, metadata: dict | None) -> bytes:
    """safetensors' own file for one-element stand-ins of ``tensors`` (its header order and layout)."""
    if tensors and all(isinstance(v, np.ndarray) for v in tensors.values()):
        from safetensors.numpy import save  # deferred: safetensors

        return save({k: np.zeros(1, dtype=v.dtype) for k, v in tensors.items()}, metadata=metadata)
    import torch  # deferred: torch
    from safetensors.torch import save  # deferred: safetensors

    return save({k: torch.zeros(1, dtype=v.dtype) for k, v in tensors.items()}, metadata=metadata)


def _layout(tensors: dict, metadata: dict | None) -> tuple[bytes, list[str]]:
    """(header bytes incl. length prefix and padding, names in data order), as safetensors lays them out."""
    probe = _probe(tensors, metadata)
    (n,) = struct.unpack("<Q", probe[:8])
    header = json.loads(probe[8:8 + n], object_pairs_hook=dict)
    order = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    at = 0
    for name in order:
        t = tensors[name]
        size = t.nbytes if isinstance(t, np.ndarray) else t.numel() * t.element_size()
        header[name]["shape"] = list(t.shape)
        header[name]["data_offsets"] = [at, at + size]
        at += size
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw, order


def _bytes_of(t) -> memoryview:
    if isinstance(t, np.ndarray):
        flat = np.ascontiguousarray(t).reshape(-1)
        return memoryview(flat.view(np.uint8)) if flat.size else memoryview(b"")
    import torch  # deferred: torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def sha256_of(tensors: dict, metadata: dict | None = None) -> str:
    """sha256 of the file safetensors would write, from the tensors' memory (no file, no bytes copy)."""
    return sha256_hasher(tensors, metadata).hexdigest()


def sha256_hasher(tensors: dict, metadata: dict | None = None):
    """A sha256 object fed that file's bytes, to hash more after them (woolf/validator/ci.py: + outer state)."""
    head, order = _layout(tensors, metadata)
    sha = hashlib.sha256(head)
    for name in order:
        sha.update(_bytes_of(tensors[name]))
    return sha


def write_hashed(tensors: dict, path: Path, metadata: dict | None = None, stop=None) -> tuple[str, str]:
    """``stop``: a threading.Event; once set, the write raises Stopped at its next slice."""
    return _write(tensors, tensors.__getitem__, path, metadata, stop)


def stand_ins(spec: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> dict[str, np.ndarray]:
    """Arrays of each dtype and shape that hold one element of memory (a zero-stride view): what
    ``write_stream`` lays the header out from before any tensor exists."""
    return {k: np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=shape, strides=(0,) * len(shape))
            for k, (dtype, shape) in spec.items()}


def write_stream(spec: dict[str, tuple[np.dtype, tuple[int, ...]]], produce, path: Path,
                 metadata: dict | None = None) -> tuple[str, str]:
    """The file ``write_hashed`` would write for numpy arrays of ``spec``, each made by ``produce(name)``
    only when it is written (in the file's order): one tensor in memory at a time, not a model."""

    def checked(name):
        arr = produce(name)
        if arr.dtype != spec[name][0] or tuple(arr.shape) != tuple(spec[name][1]):
            raise ValueError(f"{name}: produced {arr.dtype}{list(arr.shape)}, declared otherwise")
        return arr

    return _write(stand_ins(spec), checked, path, metadata)


def _write(layout_of: dict, get, path: Path, metadata: dict | None, stop=None) -> tuple[str, str]:
    head, order = _layout(layout_of, metadata)
    digests = Digests()  # md5 and sha256 in helper threads while the next slice is written
    with open(path, "wb", buffering=0) as fh:
        for block in itertools.chain([memoryview(head)], (_bytes_of(get(n)) for n in order)):  # lazily
            for i in range(0, len(block), CHUNK):
                if stop is not None and stop.is_set():
                    digests.hexdigests()  # the helper threads are done with the last slice
                    raise Stopped(str(path))
                piece = block[i:i + CHUNK]
                digests.update(piece)
                view = piece
                while view:
                    view = view[fh.write(view):]
    return digests.hexdigests()
