"""The safetensors header of an untrusted file, checked by hand before any data is read.

Usage (by woolf/storage/weights.py, which re-exports read_spec and Spec):
    spec = read_spec(path, limits)                        # {name: (dtype, shape)}
    spec, offsets, start, raw = header(path, limits, label)  # and where each tensor's bytes lie

Only a regular file is opened (never a FIFO or a device); at most 8 bytes plus
``limits.max_header_bytes`` are read. Every header value is type-checked before
it is used (a dtype that is a list, offsets that are strings, a shape of
`[Infinity]`, a header nested 200k deep are refusals), and the tensors must
tile the data exactly, as safetensors requires.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.protocol.safejson import loads_untrusted

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
    return header(path, limits, label)[0]


def header(path: Path, limits: LimitsConfig, label: str) -> tuple[Spec, dict[str, tuple[int, int]], int, bytes]:
    """(spec, {name: (begin, end)}, offset of the data, the bytes before it): the header, checked as
    safetensors checks it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without waiting, then is refused
    except FileNotFoundError:
        raise InvalidWeightsError(f"{label}: {path} does not exist") from None
    except OSError as exc:
        raise InvalidWeightsError(f"{label}: {path.name} cannot be opened as a plain file ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # checked on the descriptor before any read (a directory opens too)
        os.close(fd)
        raise InvalidWeightsError(f"{label}: {path.name} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
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
