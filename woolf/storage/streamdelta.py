"""A float32 delta computed and written tensor by tensor: `woolf submit` in constant memory.

Usage:
    delta = StreamedDelta(trained_path, base_path, limits, expect=base_spec)   # headers checked now
    md5, sha = delta.write(out_path)      # trained - base, one tensor at a time, hashed as written

The trained file is the participant's (checked like any untrusted file: header first, then
shapes and dtypes against the base's); the base is the version's object, already sha256-verified
(`Ledger.weights_path`). Each tensor is read into fresh memory from both files, subtracted in
place (the same IEEE float32 subtraction as woolf/core/npdelta.py, so the file is bit for bit
the one the dense kind writes from whole models: storage/kinds/dense.py), its norm taken (woolf/core/finite.py: NaN/Inf
refused, all zeros noticed), written and hashed; then it is dropped. Peak memory is a few
tensors, never a model. A refused delta leaves no file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from woolf.core.finite import scan
from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.header import header
from woolf.storage.weights import TRUSTED_LIMITS, compare_spec
from woolf.storage.writer import write_stream


class ZeroDelta(InvalidWeightsError):
    """Every tensor of the delta is zero (the caller words the refusal)."""


def _read(fh, start: int, begin: int, end: int, shape, label: str) -> np.ndarray:
    arr = np.empty(shape, dtype=np.float32)
    view = memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(bytearray())
    fh.seek(start + begin)
    if fh.readinto(view) != end - begin:
        raise InvalidWeightsError(f"{label}: the file changed while it was read")
    return arr


class StreamedDelta:
    def __init__(self, trained: Path, base: Path, limits: LimitsConfig, expect: dict,
                 label: str = "trained weights"):
        self.trained, self.base, self.label = Path(trained), Path(base), label
        self.t_spec, self.t_off, self.t_start, _ = header(self.trained, limits, label)
        compare_spec(self.t_spec, expect, label)
        self.b_spec, self.b_off, self.b_start, _ = header(self.base, TRUSTED_LIMITS, "base weights")
        compare_spec(self.b_spec, expect, "base weights")
        if any(dtype != "F32" for dtype, _ in expect.values()):
            raise ValueError("a streamed delta is float32")
        self.spec = expect

    def write(self, out: Path) -> tuple[str, str]:
        """(md5, sha256) of the delta file written at ``out``; InvalidWeightsError (no file) for
        NaN/Inf, ZeroDelta when every tensor is zero."""
        nonzero = False

        with open(self.trained, "rb") as tf, open(self.base, "rb") as bf:
            def produce(name):
                nonlocal nonzero
                shape = self.spec[name][1]
                t = _read(tf, self.t_start, *self.t_off[name], shape, self.label)
                b = _read(bf, self.b_start, *self.b_off[name], shape, "base weights")
                with np.errstate(all="ignore"):
                    np.subtract(t, b, out=t)
                del b
                bad, any_nonzero = scan({name: t})
                if bad is not None:
                    raise InvalidWeightsError(f"delta: tensor {name!r} holds NaN or Inf values")
                nonzero = nonzero or any_nonzero
                return t

            try:
                digests = write_stream({k: (np.dtype(np.float32), shape) for k, (_, shape) in self.spec.items()},
                                       produce, out)
            except BaseException:
                Path(out).unlink(missing_ok=True)
                raise
        if not nonzero:
            Path(out).unlink(missing_ok=True)
            raise ZeroDelta("the delta is all zeros")
        return digests
