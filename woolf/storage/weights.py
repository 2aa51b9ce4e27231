"""Safetensors I/O for untrusted files: header checks before any data is read.

Usage:
    spec = read_spec(path, limits)                 # {name: (dtype, shape)}, header only
    tensors = load_checked(path, limits, expect=base_spec)
    arrays = load_checked(path, limits, numpy=True)   # numpy arrays: no torch import (numpy_dtypes only)
    save_atomic(tensors, out_path)                 # temp file + fsync + rename

Weights are never read with pickle or torch.load. Every header value is
type-checked before it is used (a dtype that is a list, offsets that are
strings, a shape of `[Infinity]`, a header nested 200k deep are refusals).
torch is imported only when torch tensors are asked for: a command that only
moves, hashes or subtracts float32 weights (`woolf submit`) reads numpy arrays.
"""

from __future__ import annotations

import functools
import os
import stat
import struct
import tempfile
from pathlib import Path

import numpy as np

from woolf.config import LimitsConfig
from woolf.errors import InvalidWeightsError
from woolf.storage.safejson import loads_untrusted

_DTYPE_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U8": 1, "BOOL": 1,
}
Spec = dict[str, tuple[str, tuple[int, ...]]]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry(name: str, info, data_len: int, label: str) -> tuple[str, tuple[int, ...]]:
    """One header entry checked by type before any arithmetic: (dtype, shape)."""
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise InvalidWeightsError(f"{label}: malformed header entry {name[:80]!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in _DTYPE_SIZES:
        raise InvalidWeightsError(f"{label}: tensor {name[:80]!r} has unsupported dtype {str(dtype)[:40]}")
    if not isinstance(shape, list) or len(shape) > 16 or not all(_is_int(d) for d in shape):
        raise InvalidWeightsError(f"{label}: tensor {name[:80]!r} has a shape that is not a list of integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise InvalidWeightsError(f"{label}: tensor {name[:80]!r} has data_offsets that are not two integers")
    numel = 1
    for d in shape:
        if d < 0:
            raise InvalidWeightsError(f"{label}: tensor {name[:80]!r} has a negative dimension")
        numel *= d
    begin, end = offsets
    if not (0 <= begin <= end <= data_len) or end - begin != numel * _DTYPE_SIZES[dtype]:
        raise InvalidWeightsError(f"{label}: tensor {name[:80]!r} has offsets outside the file")
    return dtype, tuple(shape)


def read_spec(path: Path, limits: LimitsConfig, label: str = "weights") -> Spec:
    """Validate the safetensors header of ``path`` and return names, dtypes, shapes.

    Only a regular file is opened (never a FIFO or a device), and at most 8 bytes
    plus ``limits.max_header_bytes`` are read.
    """
    return _header(path, limits, label)[0]


def _header(path: Path, limits: LimitsConfig, label: str) -> tuple[Spec, dict[str, tuple[int, int]], int, bytes]:
    """(spec, {name: (begin, end)}, offset of the data, the bytes before it): the header, checked as
    safetensors checks it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting, then is refused
    except FileNotFoundError:
        raise InvalidWeightsError(f"{label}: {path} does not exist") from None
    except OSError as exc:
        raise InvalidWeightsError(f"{label}: {path.name} cannot be opened as a plain file ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InvalidWeightsError(f"{label}: {path.name} is not a regular file")
        size = st.st_size
        if size > limits.max_delta_bytes:
            raise InvalidWeightsError(
                f"{label}: file is {size} bytes, over the ledger's limit of {limits.max_delta_bytes}",
                hint="limits.max_delta_bytes in ledger/woolf.toml",
            )
        if size < 8:
            raise InvalidWeightsError(f"{label}: truncated file ({size} bytes), not safetensors")
        prefix = fh.read(8)
        (n,) = struct.unpack("<Q", prefix)
        if n > limits.max_header_bytes or 8 + n > size:
            raise InvalidWeightsError(
                f"{label}: header length {n} is impossible for a {size}-byte file "
                f"(limit {limits.max_header_bytes}); not a safetensors file, or truncated"
            )
        raw = fh.read(n)
    try:
        header = loads_untrusted(raw, limits.max_header_bytes, max_depth=4)
    except ValueError as exc:
        raise InvalidWeightsError(f"{label}: header is not a safetensors header: {exc}") from None
    if not isinstance(header, dict):
        raise InvalidWeightsError(f"{label}: header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise InvalidWeightsError(f"{label}: __metadata__ is not a map of strings")
    if len(header) > limits.max_tensors:
        raise InvalidWeightsError(
            f"{label}: {len(header)} tensors, over the limit of {limits.max_tensors}"
        )
    data_len = size - 8 - n
    spec = {name: _entry(name, info, data_len, label) for name, info in header.items()}
    offsets = {name: tuple(header[name]["data_offsets"]) for name in spec}
    end = 0  # the tensors tile the data exactly, as safetensors requires: no gap, no overlap
    for begin, stop in sorted(offsets.values()):
        if begin != end:
            raise InvalidWeightsError(f"{label}: tensor data overlaps or leaves a gap at byte {begin}")
        end = stop
    if end != data_len:
        raise InvalidWeightsError(f"{label}: {data_len - end} bytes after the last tensor; not safetensors")
    return spec, offsets, 8 + n, prefix + raw


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
    import torch

    return {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
            "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
            "BOOL": torch.bool}


def __getattr__(name: str):
    if name == "_TORCH_DTYPES":  # the old constant, for importers that use torch anyway
        return torch_dtypes()
    raise AttributeError(name)


def _torch_alloc(dtype: str, shape: tuple[int, ...]):
    import torch

    t = torch.empty(shape, dtype=torch_dtypes()[dtype])
    return t, memoryview(t.reshape(-1).view(torch.uint8).numpy())


def _numpy_alloc(dtype: str, shape: tuple[int, ...]):
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
        numpy = bool(spec) and all(dtype == "F32" for dtype, _ in spec.values())
    if numpy and not numpy_dtypes(spec):
        raise InvalidWeightsError(f"{label}: a BF16 tensor cannot be read as a numpy array")
    alloc = _numpy_alloc if numpy else _torch_alloc
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
        if got[name] != expect[name]:
            raise InvalidWeightsError(
                f"{label}: tensor {name!r} is {got[name][0]}{list(got[name][1])}, "
                f"the model has {expect[name][0]}{list(expect[name][1])}"
            )


def check_finite(tensors: dict, label: str) -> None:
    """NaN/Inf anywhere is an InvalidWeightsError (a norm proves finiteness; exact check only if it cannot)."""
    from woolf.core.finite import first_nonfinite

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
    not torch tensors (no BF16); ``numpy="float32"``: numpy arrays if every tensor is F32. ``on_block``: every byte of the file as it is read (to hash it).
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


_TRUSTED = LimitsConfig(max_delta_bytes=1 << 50, max_header_bytes=1 << 30, max_tensors=1 << 24)


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
    import torch

    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in tensors.items()}


def save_atomic(tensors: dict, path: Path, metadata: dict | None = None,
                durable: bool = True, hashed: bool = False) -> tuple[str, str] | None:
    """Write by temp file (+ fsync) + rename, so a reader never sees half a file.

    ``durable=False`` skips the fsync for files that are hashed and uploaded right
    away (a torn file after a power cut fails its hash and is fetched again).
    ``hashed=True`` hashes the bytes while writing them (woolf/storage/stwrite.py,
    the same bytes as safetensors' own writer) and returns (md5, sha256): no re-read.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    digests = None
    try:
        if hashed:
            from woolf.storage.stwrite import write_hashed

            digests = write_hashed(tensors, Path(tmp), metadata=metadata)
        elif tensors and all(isinstance(v, np.ndarray) for v in tensors.values()):
            from safetensors.numpy import save_file

            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp, metadata=metadata)
        else:
            from safetensors.torch import save_file

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
