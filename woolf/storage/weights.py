"""Safetensors I/O for untrusted files: header checks before any data is read.

Usage:
    spec = read_spec(path, limits)                 # {name: (dtype, shape)}, header only
    tensors = load_checked(path, limits, expect=base_spec)
    arrays = load_checked(path, limits, numpy=True)   # numpy arrays: no torch import (numpy_dtypes only)
    save_atomic(tensors, out_path)                 # temp file + fsync + rename

Weights are never read with pickle or torch.load; the header is checked by
hand first (woolf/storage/header.py).
torch is imported only when torch tensors are asked for: a command that only
moves, hashes or subtracts float32 weights (`woolf submit`) reads numpy arrays.
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from woolf.core.finite import first_nonfinite
from woolf.core.npdelta import all_float32
from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.header import Spec, read_spec  # noqa: F401 - re-exported
from woolf.storage.header import header as _header
from woolf.storage.writer import write_hashed

CHUNK = 16 << 20  # bytes read between two hash updates when the reader hashes as it loads
_NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_NUMPY_NAMES = {np.dtype(v): k for k, v in _NUMPY_DTYPES.items()}


def numpy_dtypes(spec: Spec) -> bool:
    """Whether every tensor of ``spec`` has a numpy dtype (all but BF16), so it can be read as numpy arrays."""
    return all(dtype in _NUMPY_DTYPES for dtype, _ in spec.values())


@functools.cache
def torch_dtypes() -> dict:
    import torch  # deferred: torch

    return {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
            "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
            "BOOL": torch.bool}


def torch_alloc(dtype: str, shape: tuple[int, ...]):
    import torch  # deferred: torch

    t = torch.empty(shape, dtype=torch_dtypes()[dtype])
    return t, memoryview(t.reshape(-1).view(torch.uint8).numpy())


try:  # a private name, moved by numpy 2
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None


@functools.cache
def _no_huge_pages() -> None:
    """numpy madvises transparent huge pages for large arrays; on a VM whose memory is fragmented
    the kernel then compacts memory on first touch: reading 381 MiB into them took 0.1-0.93 s
    (most often the slow end under load), 0.23 s steadily without (benchmarks/RESULTS.md §1)."""
    if _set_madvise_hugepage is not None:
        _set_madvise_hugepage(False)


def _numpy_alloc(dtype: str, shape: tuple[int, ...]):
    _no_huge_pages()
    a = np.empty(shape, dtype=_NUMPY_DTYPES[dtype])
    return a, memoryview(a.reshape(-1).view(np.uint8))


def _read_tensors(path: Path, limits: LimitsConfig, label: str, numpy: bool = False, on_block=None) -> dict:
    """Each tensor read straight into its own memory: the file costs its size once (no mmap beside a copy).

    ``on_block(bytes-like)``: called with every byte of the file, in order, as it is read (the
    header, then the tensors' memory in slices of at most CHUNK): the caller hashes the bytes it
    loads in the same pass (the tensors tile the data exactly, so nothing is skipped).
    """
    spec, offsets, start, head = _header(path, limits, label)
    if on_block is not None:
        on_block(head)
    if numpy == "float32":  # numpy arrays for a float32 model, torch tensors for any other
        numpy = all_float32(spec)
    if numpy and not numpy_dtypes(spec):
        raise InvalidWeightsError(f"{label}: a BF16 tensor cannot be read as a numpy array")
    alloc = _numpy_alloc if numpy else torch_alloc
    out = {}
    with open(path, "rb") as fh:
        for name in sorted(spec, key=lambda k: offsets[k]):
            dtype, shape = spec[name]
            t, view = alloc(dtype, shape)
            begin, end = offsets[name]
            fh.seek(start + begin)
            for at in range(0, end - begin, CHUNK if on_block is not None else max(1, end - begin)):
                piece = view[at:at + CHUNK] if on_block is not None else view
                if fh.readinto(piece) != len(piece):
                    raise InvalidWeightsError(f"{label}: the file changed while it was read")
                if on_block is not None:
                    on_block(piece)
            out[name] = t
    return {k: out[k] for k in sorted(out)}


def compare_spec(got: Spec, expect: Spec, label: str) -> None:
    missing = sorted(set(expect) - set(got))
    extra = sorted(set(got) - set(expect))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing tensors {missing[:5]}")
        if extra:
            parts.append(f"unexpected tensors {extra[:5]}")
        raise InvalidWeightsError(
            f"{label}: not the ledger's model: " + "; ".join(parts),
            hint="train from the ledger's current weights (`woolf pull`, `woolf train`)",
        )
    for name in sorted(expect):
        if got[name] != expect[name] and got[name][1] == expect[name][1] and expect[name][0] == "F32" \
                and got[name][0] in ("BF16", "F16"):
            raise InvalidWeightsError(
                f"{label}: tensor {name!r} is {got[name][0]}, but this ledger keeps float32 master weights",
                hint="submit the float32 weights training produced (`woolf train` writes them); "
                     "a delta cast to bfloat16/float16 loses most of a small update")
        if got[name] != expect[name]:
            raise InvalidWeightsError(
                f"{label}: tensor {name!r} is {got[name][0]}{list(got[name][1])}, "
                f"the model has {expect[name][0]}{list(expect[name][1])}"
            )


def check_finite(tensors: dict, label: str) -> None:
    """NaN/Inf anywhere is an InvalidWeightsError (a norm proves finiteness; exact check only if it cannot)."""
    name = first_nonfinite(tensors)
    if name is not None:
        raise InvalidWeightsError(f"{label}: tensor {name!r} holds NaN or Inf values")


def load_checked(
    path: Path, limits: LimitsConfig, expect: Spec | None = None, label: str = "weights",
    finite: bool = True, numpy: bool = False, on_block=None,
) -> dict:
    """Header checks, then the tensors; shape/dtype against ``expect``; finiteness.

    ``finite=False``: the caller proves finiteness itself from a later pass (a
    delta's norm), so the tensors are not scanned here. ``numpy``: numpy arrays,
    not torch tensors (no BF16); ``numpy="float32"``: numpy arrays if every tensor is F32.
    ``on_block``: every byte of the file as it is read (to hash it).
    """
    spec = read_spec(path, limits, label)
    if expect is not None:
        compare_spec(spec, expect, label)
    try:
        tensors = _read_tensors(path, limits, label, numpy=numpy, on_block=on_block)
    except OSError as exc:
        raise InvalidWeightsError(f"{label}: cannot read the file: {exc.strerror}") from None
    if finite:
        check_finite(tensors, label)
    return tensors


_TRUSTED = LimitsConfig(max_delta_bytes=1 << 50, max_header_bytes=1 << 30, max_tensors=1 << 24,
                        max_lora_rank=1 << 30, max_lora_expand=math.inf)  # lora: what a ledger allowed when it merged


def load_trusted(path: Path, numpy: bool = False, on_block=None) -> dict:
    """Weights whose hash was already checked against the ledger's record (read as load_checked reads),
    or are hashed on the way (``on_block``) and checked by the caller before they are used."""
    return _read_tensors(path, _TRUSTED, "weights", numpy=numpy, on_block=on_block)


def spec_of(tensors: dict) -> Spec:
    """{name: (dtype, shape)} of torch tensors or numpy arrays."""
    out = {}
    names = None
    for k, v in tensors.items():
        if isinstance(v, np.ndarray):
            out[k] = (_NUMPY_NAMES[v.dtype], tuple(v.shape))
            continue
        if names is None:
            names = {t: n for n, t in torch_dtypes().items()}
        out[k] = (names[v.dtype], tuple(v.shape))
    return out


def to_torch(tensors: dict) -> dict:
    """numpy arrays as torch tensors sharing their memory (torch tensors pass through)."""
    import torch  # deferred: torch

    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in tensors.items()}


def save_atomic(tensors: dict, path: Path, metadata: dict | None = None,
                durable: bool = True, hashed: bool = False, stop=None) -> tuple[str, str] | None:
    """Write by temp file (+ fsync) + rename, so a reader never sees half a file.

    ``durable=False`` skips the fsync for files that are hashed and uploaded right
    away (a torn file after a power cut fails its hash and is fetched again).
    ``hashed=True`` hashes the bytes while writing them (woolf/storage/writer.py,
    the same bytes as safetensors' own writer) and returns (md5, sha256): no re-read; ``stop``
    (a threading.Event, with ``hashed``): once set, writer.Stopped is raised and nothing is left.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    digests = None
    try:
        if hashed:
            digests = write_hashed(tensors, Path(tmp), metadata=metadata, stop=stop)
        elif tensors and all(isinstance(v, np.ndarray) for v in tensors.values()):
            from safetensors.numpy import save_file  # deferred: safetensors

            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp, metadata=metadata)
        else:
            from safetensors.torch import save_file  # deferred: safetensors

            save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return digests


TRUSTED_LIMITS = _TRUSTED  # for files whose hash was checked against the ledger's record
