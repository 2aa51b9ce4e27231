"""Delta files of every kind: dense safetensors, or top-k parts (woolf/core/compress.py) checked then expanded.

Usage:
    bound = size_bound(declared, model_spec)                  # most bytes a delta of this kind can be
    delta = load_delta(path, declared, model_spec, limits)    # {name: tensor in the model's dtype}
    # a lora delta (woolf/storage/lora.py) comes back as a LoraTensors: read lazily, each target expanded
    save_delta(delta, path, spec)                             # dense (spec None) or compressed parts

``declared`` is submission.json's ``delta`` object. A top-k file's header must
be exactly the parts the model and the declared chunk/k/bits imply (names,
dtypes, shapes) before a byte of data is read; then every offset, level and
scale is checked, and only then is the dense delta built (the model's size,
never more). Any problem is an InvalidWeightsError naming it.
"""

from __future__ import annotations

from pathlib import Path

from woolf.errors import InvalidWeightsError
from woolf.protocol.compress_spec import CompressSpec, spec_from_declared
from woolf.protocol.config import LimitsConfig
from woolf.storage.weights import compare_spec, load_checked, read_spec, save_atomic, torch_dtypes

HEADER_SLACK = 4096  # a top-k file's header (three entries) is ~200 bytes


def declared_spec(declared: dict, label: str = "delta") -> CompressSpec | None:
    """None for a dense delta; the CompressSpec of a top-k one; InvalidWeightsError otherwise."""
    kind = declared.get("kind")
    if kind == "dense":
        return None
    if kind != "topk":
        raise InvalidWeightsError(f"{label}: unknown delta kind {str(kind)[:40]!r}")
    try:
        return spec_from_declared(declared)
    except (ValueError, TypeError) as exc:
        raise InvalidWeightsError(f"{label}: bad topk parameters: {exc}") from None


def size_bound(declared: dict, model_spec: dict) -> int | None:
    """The most bytes a delta of this declared kind can take for this model (None: dense, no bound here)."""
    from woolf.core.compress import parts_bytes  # deferred: loads torch

    if declared.get("kind") == "lora":  # bounded by limits.max_delta_bytes, checked when opened
        return None
    spec = declared_spec(declared)
    return None if spec is None else 8 + HEADER_SLACK + parts_bytes(spec, model_spec)


def load_delta(path: Path, declared: dict, model_spec: dict, limits: LimitsConfig,
               label: str = "delta", finite: bool = True, on_block=None) -> dict:
    """``finite=False``: a dense delta is not scanned for NaN/Inf here (the caller's norm proves it).
    ``on_block``: every byte of the file as it is read (weights.load_checked), to hash it on the way."""
    if declared.get("kind") == "lora":  # a LoraTensors, each target expanded when it is read
        from woolf.storage.lora import LoraTensors  # deferred: loads torch

        if on_block is not None:
            raise ValueError("a lora delta is hashed before it is opened")
        return LoraTensors.open(path, limits, expect=model_spec, label=label)
    spec = declared_spec(declared, label)
    if spec is None:
        return load_checked(path, limits, expect=model_spec, label=label, finite=finite, on_block=on_block)
    from woolf.core.compress import expand  # deferred: loads torch

    parts = _parts(path, spec, model_spec, limits, label, on_block)
    try:
        return expand(parts, spec, model_spec, {n: torch_dtypes()[dt] for n, (dt, _) in model_spec.items()})
    except ValueError as exc:
        raise InvalidWeightsError(f"{label}: {exc}") from None


def load_entries(path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta",
                 check: bool = True):
    """A topk delta as {name: (flat positions, float32 values)}, never dense (rebuilds; ``check``: see entries)."""
    from woolf.core.compress import entries  # deferred: loads torch

    spec = declared_spec(declared, label)
    assert spec is not None
    parts = _parts(path, spec, model_spec, limits, label)
    try:
        return {name: (where, vals) for name, _, where, vals in entries(parts, spec, model_spec, check)}
    except ValueError as exc:
        raise InvalidWeightsError(f"{label}: {exc}") from None


def _parts(path: Path, spec: CompressSpec, model_spec: dict, limits: LimitsConfig, label: str, on_block=None):
    from woolf.core.compress import parts_spec  # deferred: loads torch

    want = parts_spec(spec, model_spec)
    got = read_spec(path, limits, label)
    try:
        compare_spec(got, want, f"{label} (topk chunk={spec.chunk} k={spec.k} bits={spec.bits})")
    except InvalidWeightsError as exc:
        raise InvalidWeightsError(f"{exc.message}: more or other data than the declared k") from None
    return load_checked(path, limits, expect=want, label=label, on_block=on_block)


def save_delta(delta: dict, path: Path, spec: CompressSpec | None = None,
               parts: dict | None = None) -> tuple[str, str]:
    """A dense delta as it is, or its compressed parts (``parts``, else computed from ``delta``).

    Returns (md5, sha256) of the file, hashed while it was written.
    """
    if spec is None:
        return save_atomic(delta, path, durable=False, hashed=True)
    from woolf.core.compress import compress  # deferred: loads torch

    return save_atomic(parts if parts is not None else compress(delta, spec), path, durable=False, hashed=True)
