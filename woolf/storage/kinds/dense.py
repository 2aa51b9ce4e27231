"""The `dense` kind: the update itself, every tensor of the model in the model's dtype and shape.

Usage:
    DENSE.size_bound(declared, model_spec, limits)      # 8 + limits.max_header_bytes + the tensors' bytes
    delta = DENSE.open(path, declared, spec, limits)    # LazyTensors: header checked now, tensors read when used
    delta = DENSE.load(path, declared, spec, limits)    # {name: tensor} in memory, checked (storage/weights.py)
    md5, sha256 = DENSE.write(delta, path, declared)    # a dict of tensors, or a StreamedDelta writing itself

Its file is compared with the model tensor by tensor (storage/weights.py compare_spec), so it can take
no more than 8 bytes, a header of at most ``limits.max_header_bytes``, and the tensors' bytes.
An audit derives it from the final state as `woolf submit` does (``proof_derive``: trained - base).
"""

from __future__ import annotations

import math
from pathlib import Path

from woolf.protocol.config import LimitsConfig
from woolf.storage.kinds.base import DeltaKind, Derivation

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def dense_bound(model_spec: dict, limits: LimitsConfig) -> int:
    """The most bytes a dense delta of this model can take: tensors as the model's, and a header."""
    data = 0
    for dtype, shape in model_spec.values():
        data += math.prod(shape) * DTYPE_BYTES.get(dtype, 8)
    return 8 + limits.max_header_bytes + data


class DenseKind(DeltaKind):
    name = "dense"
    lazy = True
    stores_update = True

    def size_bound(self, declared: dict, model_spec: dict, limits: LimitsConfig) -> int:
        return dense_bound(model_spec, limits)

    def open(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta"):
        from woolf.storage.lazy import LazyTensors  # deferred: loads torch

        return LazyTensors.open(path, limits, expect=model_spec, label=label)

    def load(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta",
             finite: bool = True, on_block=None):
        from woolf.storage.weights import load_checked  # deferred: loads numpy

        return load_checked(path, limits, expect=model_spec, label=label, finite=finite, on_block=on_block)

    def held_whole(self, size: int, budget: int) -> bool:
        return size <= budget  # a bigger one is compared tensor by tensor, not kept

    def write(self, delta, path: Path, declared: dict, parts: dict | None = None) -> tuple[str, str]:
        if hasattr(delta, "write"):  # storage/streamdelta.py: computed and written tensor by tensor
            return delta.write(path)
        from woolf.storage.weights import save_atomic  # deferred: loads numpy

        return save_atomic(delta, path, durable=False, hashed=True)

    def proof_derive(self, out: dict, d: Derivation) -> tuple[dict, str | None]:
        return trained_minus_base(out, d), None


def trained_minus_base(out: dict, d: Derivation) -> dict:
    """trained - base as `woolf submit` computes it (the last follow's shift first, as `woolf train`)."""
    import torch  # deferred: torch

    from woolf.core.merge import compute_delta  # deferred: torch

    trained = out if d.shift is None else {k: (v.to(torch.float32) + d.shift[k]).to(v.dtype) for k, v in out.items()}
    return compute_delta(trained, d.base)
