"""Safetensors I/O for untrusted files: header checks before any data is read.

Usage:
    spec = read_spec(path, limits)                 # {name: (dtype, shape)}, header only
    tensors = load_checked(path, limits, expect=base_spec)
    save_atomic(tensors, out_path)                 # temp file + fsync + rename

Weights are never read with pickle or torch.load.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from woolf.config import LimitsConfig
from woolf.errors import InvalidWeightsError

_DTYPE_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U8": 1, "BOOL": 1,
}
Spec = dict[str, tuple[str, tuple[int, ...]]]


def read_spec(path: Path, limits: LimitsConfig, label: str = "weights") -> Spec:
    """Validate the safetensors header of ``path`` and return names, dtypes, shapes."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InvalidWeightsError(f"{label}: {path} does not exist") from None
    if size > limits.max_delta_bytes:
        raise InvalidWeightsError(
            f"{label}: file is {size} bytes, over the ledger's limit of {limits.max_delta_bytes}",
            hint="limits.max_delta_bytes in ledger/woolf.toml",
        )
    if size < 8:
        raise InvalidWeightsError(f"{label}: truncated file ({size} bytes), not safetensors")
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > limits.max_header_bytes or 8 + n > size:
            raise InvalidWeightsError(
                f"{label}: header length {n} is impossible for a {size}-byte file "
                f"(limit {limits.max_header_bytes}); not a safetensors file, or truncated"
            )
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidWeightsError(f"{label}: header is not valid JSON; not safetensors") from None
    if not isinstance(header, dict):
        raise InvalidWeightsError(f"{label}: header is not a JSON object")
    header.pop("__metadata__", None)
    if len(header) > limits.max_tensors:
        raise InvalidWeightsError(
            f"{label}: {len(header)} tensors, over the limit of {limits.max_tensors}"
        )
    spec: Spec = {}
    data_len = size - 8 - n
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            shape = tuple(int(d) for d in shape)
        except (KeyError, TypeError, ValueError):
            raise InvalidWeightsError(f"{label}: malformed header entry {name!r}") from None
        if dtype not in _DTYPE_SIZES:
            raise InvalidWeightsError(f"{label}: tensor {name!r} has unsupported dtype {dtype}")
        numel = 1
        for d in shape:
            if d < 0:
                raise InvalidWeightsError(f"{label}: tensor {name!r} has a negative dimension")
            numel *= d
        if not (0 <= begin <= end <= data_len) or end - begin != numel * _DTYPE_SIZES[dtype]:
            raise InvalidWeightsError(f"{label}: tensor {name!r} has offsets outside the file")
        spec[name] = (dtype, shape)
    return spec


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


def check_finite(tensors: dict[str, torch.Tensor], label: str) -> None:
    for name in sorted(tensors):
        t = tensors[name]
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise InvalidWeightsError(f"{label}: tensor {name!r} holds NaN or Inf values")


def load_checked(
    path: Path, limits: LimitsConfig, expect: Spec | None = None, label: str = "weights"
) -> dict[str, torch.Tensor]:
    """Header checks, then the tensors; shape/dtype against ``expect``; finiteness."""
    spec = read_spec(path, limits, label)
    if expect is not None:
        compare_spec(spec, expect, label)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise InvalidWeightsError(f"{label}: safetensors refused the file: {exc}") from None
    check_finite(tensors, label)
    return tensors


def load_trusted(path: Path) -> dict[str, torch.Tensor]:
    """Weights whose hash was already checked against the ledger's record."""
    return load_file(str(path))


def spec_of(tensors: dict[str, torch.Tensor]) -> Spec:
    names = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
             torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
    return {k: (names[v.dtype], tuple(v.shape)) for k, v in tensors.items()}


def save_atomic(tensors: dict[str, torch.Tensor], path: Path, metadata: dict | None = None,
                durable: bool = True) -> None:
    """Write by temp file (+ fsync) + rename, so a reader never sees half a file.

    ``durable=False`` skips the fsync for files that are hashed and uploaded right
    away (a torn file after a power cut fails its hash and is fetched again).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=metadata)
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


