"""The delta of float32 weights in numpy: the same bytes as woolf/core/merge.py's torch arithmetic.

Usage:
    if is_numpy(base):                                 # read with numpy="float32" (storage/weights.py)
        delta = subtract(trained, base, into=trained)  # numpy arrays; trained's memory is reused

``trained - base`` is one IEEE-754 float32 subtraction per element, rounded
to nearest even, in numpy as in torch (neither flushes subnormals on the CPU
by default; -0.0, subnormals and large magnitudes give identical bits; a test
compares the files). It lets `woolf submit` of a float32 model run without
importing torch (1-4 s per command). Other dtypes go through merge.compute_delta.
"""

from __future__ import annotations

import numpy as np


def is_numpy(tensors: dict) -> bool:
    return bool(tensors) and all(isinstance(v, np.ndarray) for v in tensors.values())


def all_float32(spec: dict) -> bool:
    return bool(spec) and all(dtype == "F32" for dtype, _ in spec.values())


def subtract(trained: dict[str, np.ndarray], base: dict[str, np.ndarray],
             into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """trained - base per tensor (float32), written into ``into``'s arrays where they fit."""
    if set(trained) != set(base):
        raise ValueError("trained and base name different tensors")
    out = {}
    with np.errstate(all="ignore"):  # an overflow is an inf in the delta, refused by its finiteness check
        for name in sorted(base):
            out[name] = _one(name, trained[name], base[name], None if into is None else into.get(name))
    return out


def _one(name: str, t: np.ndarray, b: np.ndarray, buf: np.ndarray | None) -> np.ndarray:
    if b.dtype != np.float32 or t.dtype != np.float32 or b.shape != t.shape:
        raise ValueError(f"{name}: numpy deltas are float32 of one shape")
    if buf is not None and buf.dtype == np.float32 and buf.shape == b.shape and buf.flags.c_contiguous:
        return np.subtract(t, b, out=buf)
    return np.subtract(t, b)
