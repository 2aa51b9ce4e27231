"""The `lora` kind's file: factor pairs per target tensor, checked before any arithmetic, expanded one tensor at a time.

Usage:
    LoraFile({"h.0.attn.c_attn.weight": (A, B, 2.0)}, base_spec).write(out)   # (md5, sha256); a PR's delta
    delta = LoraTensors.open(path, limits, expect=model_spec, label="delta")   # every rule checked now
    delta["h.0.attn.c_attn.weight"]   # the float32 update scale·B·A (core/lora.py's arithmetic of record)
    delta["wte.weight"]               # an untargeted tensor: -0.0 everywhere (the merge leaves it bit for bit)
    delta.targets                      # {target: rank}
    delta.expand_once(work_dir)        # the validator (lora.py expand_ahead): every target expanded now,
                                       # once, into an anonymous file; later reads read that file


A lora file is safetensors with, for each target tensor T of the model (shape rows x cols):
``T.lora_A`` (r x cols), ``T.lora_B`` (rows x r), both float32 or bfloat16, and ``T.lora_scale``
(float32, shape [1]: alpha/r). Nothing else. ``LoraTensors`` is a LazyTensors over the MODEL's
names (so every check, score, clip and merge treats it as any dense delta, woolf/storage/lazy.py):
reading a target expands its pair; reading any other tensor gives zeros of the tensor's shape
(-0.0 for floating tensors: ``cur + s * -0.0`` is ``cur`` bit for bit, +0.0 would turn a -0.0
weight into +0.0). One target's expansion is in memory at a time, never the whole update.

``expand_once(directory)``: a PR's delta is read a dozen times while it is judged (norms, the
replay hash, the copy screen, scoring, the merge), and each read of a target would expand it
again (O(r*rows*cols) float64 work against the file's O(r*(rows+cols))). So the validator expands
every target once, one at a time, into a float32 safetensors file created in ``directory`` with
no name (``tempfile.TemporaryFile``: O_TMPFILE on Linux, unlinked at once elsewhere): it is never
uploaded, nothing else can open it, and the system frees it when the mapping is closed or
collected, or the process dies, whatever path the verdict took. Later reads of a target read
its bytes back: the same bits as expanding again (the arithmetic of record is unchanged), the
same content hash, a disk cost of the targets' float32 size. Untargeted tensors stay -0.0
synthesised on read. Called only after ``open``'s checks (and the caller's sha256) passed.

Rules (each refusal one line naming the tensor and the rule, before any data but the scales is
read): every name is a factor of a target; the target names a tensor of the model; both halves
and the scale are there; the target is a 2-D float32 tensor; A and B are float32/bfloat16 with
shapes r x cols and rows x r; 1 <= r <= limits.max_lora_rank and r <= min(rows, cols); the scale is
finite, in (0, 1024]; the header has no ``__metadata__``; expanding every pair is at most
``limits.max_lora_expand`` multiply-adds (sum of r·rows·cols: core/lora.py check_cost).
"""

from __future__ import annotations

import json
import math
import struct
import tempfile
from pathlib import Path

import torch

from woolf.core.lora import check_cost, check_pair, check_scale, expand
from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.lazy import LazyTensors
from woolf.storage.weights import TRUSTED_LIMITS, save_atomic, torch_dtypes

SUFFIXES = (".lora_A", ".lora_B", ".lora_scale")


def split_name(key: str) -> tuple[str, str] | None:
    """("h.0.attn.c_attn.weight", ".lora_A") for "h.0.attn.c_attn.weight.lora_A"; None for other names."""
    for suffix in SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)], suffix
    return None


def check_layout(file_spec: dict, model_spec: dict, max_rank: int, label: str = "delta",
                 merged: bool = False) -> dict[str, int]:
    """{target: rank} when the file's header is a lora delta of this model; else InvalidWeightsError.
    ``merged``: a delta its ledger merged, read back (core/lora.py check_pair)."""
    dtypes = torch_dtypes()
    pairs: dict[str, dict] = {}
    for key in sorted(file_spec):
        got = split_name(key)
        if got is None:
            raise InvalidWeightsError(f"{label}: tensor {key[:80]!r} is not a LoRA factor "
                                      f"(names end in {', '.join(SUFFIXES)})")
        pairs.setdefault(got[0], {})[got[1]] = file_spec[key]
    if not pairs:
        raise InvalidWeightsError(f"{label}: a lora delta with no factor pair")
    ranks = {}
    for target in sorted(pairs):
        parts = pairs[target]
        if target not in model_spec:
            raise InvalidWeightsError(f"{label}: tensor {target[:80]!r}: a LoRA target naming no tensor of the model")
        for suffix in SUFFIXES:
            if suffix not in parts:
                what = "half a factor pair" if suffix != ".lora_scale" else "no scale"
                raise InvalidWeightsError(f"{label}: tensor {target!r}: {what} ({target}{suffix} is missing)")
        s_dtype, s_shape = parts[".lora_scale"]
        if s_dtype != "F32" or tuple(s_shape) != (1,):
            raise InvalidWeightsError(f"{label}: tensor {target!r}: lora_scale must be float32 of shape [1], "
                                      f"it is {s_dtype}{list(s_shape)}")
        t_dtype, t_shape = model_spec[target]
        if t_dtype != "F32":
            raise InvalidWeightsError(f"{label}: tensor {target!r}: LoRA targets float32 weights, "
                                      f"this one is {t_dtype}")
        (a_dt, a_shape), (b_dt, b_shape) = parts[".lora_A"], parts[".lora_B"]
        try:
            ranks[target] = check_pair(target, (dtypes[a_dt], tuple(a_shape)), (dtypes[b_dt], tuple(b_shape)),
                                       None, tuple(t_shape), max_rank, merged)
        except ValueError as exc:
            raise InvalidWeightsError(f"{label}: {exc}") from None
    return ranks


class LoraTensors(LazyTensors):
    """{model tensor name: float32 update} over a checked lora file; see the module docstring."""

    targets: dict[str, int]
    scales: dict[str, float]
    _expanded = None  # (file, data start, {target: (begin, end)}) after expand_once

    @classmethod
    def open(cls, path: Path, limits: LimitsConfig, expect: dict | None = None,
             label: str = "delta") -> LoraTensors:
        if expect is None:
            raise ValueError("a lora delta is opened against the model's spec")
        self = super().open(path, limits, None, label)  # the header, checked as any untrusted file's
        try:
            self._fh.seek(8)  # the header read again (bounded, checked): a factor file carries no metadata
            if "__metadata__" in json.loads(self._fh.read(self._start - 8)):
                raise InvalidWeightsError(f"{label}: a lora delta carries no __metadata__ (factor pairs only)")
            self.factors = self.spec
            self.targets = check_layout(self.factors, expect, limits.max_lora_rank, label, limits is TRUSTED_LIMITS)
            try:  # the expansion's work, from the header alone: over the budget, nothing is read or expanded
                check_cost({t: (r, *expect[t][1]) for t, r in self.targets.items()}, limits.max_lora_expand)
            except ValueError as exc:
                raise InvalidWeightsError(f"{label}: {exc}") from None
            self.spec = dict(expect)
            self.scales = {}
            for target in self.targets:
                value = float(self._factor(f"{target}.lora_scale")[0])
                try:
                    check_scale(target, value)
                except ValueError as exc:
                    raise InvalidWeightsError(f"{label}: {exc}") from None
                self.scales[target] = value
        except BaseException:
            self.close()
            raise
        return self

    def _factor(self, key: str) -> torch.Tensor:
        dtype, shape = self.factors[key]
        t = torch.empty(shape, dtype=torch_dtypes()[dtype])
        view = memoryview(t.reshape(-1).view(torch.uint8).numpy())
        begin, end = self._offsets[key]
        self._fh.seek(self._start + begin)
        if end > begin and self._fh.readinto(view) != end - begin:
            raise InvalidWeightsError(f"{self.label}: the file changed while it was read")
        return t

    def expand_once(self, directory: Path) -> None:
        """Every target expanded now, one at a time, into an anonymous float32 safetensors file in
        ``directory``; later reads of a target read it back (module docstring). OSError (a full disk):
        nothing changes, reads expand as before."""
        if self._expanded is not None:
            return
        offsets, at = {}, 0
        for name in sorted(self.targets):
            size = 4 * math.prod(self.spec[name][1])
            offsets[name], at = (at, at + size), at + size
        head = json.dumps({n: {"dtype": "F32", "shape": list(self.spec[n][1]), "data_offsets": list(offsets[n])}
                           for n in sorted(offsets)}, separators=(",", ":")).encode()
        head += b" " * (-len(head) % 8)
        fh = tempfile.TemporaryFile(dir=directory, prefix=".lora-expanded.")  # noqa: SIM115 - kept open
        try:
            fh.write(struct.pack("<Q", len(head)) + head)
            for name in sorted(offsets):
                fh.write(self._expand(name).reshape(-1).view(torch.uint8).numpy())
            fh.flush()
        except BaseException:
            fh.close()
            raise
        self._expanded = (fh, 8 + len(head), offsets)

    def _expand(self, name: str) -> torch.Tensor:
        return expand(self._factor(f"{name}.lora_A"), self._factor(f"{name}.lora_B"), self.scales[name])

    def _read_expanded(self, name: str) -> torch.Tensor:
        fh, start, offsets = self._expanded
        t = torch.empty(self.spec[name][1], dtype=torch.float32)
        begin, end = offsets[name]
        fh.seek(start + begin)
        if end > begin and fh.readinto(memoryview(t.reshape(-1).view(torch.uint8).numpy())) != end - begin:
            raise InvalidWeightsError(f"{self.label}: the expanded update changed while it was read")
        return t

    def close(self) -> None:
        super().close()
        if self._expanded is not None:
            self._expanded[0].close()

    def __del__(self):
        super().__del__()
        if self._expanded is not None:
            self._expanded[0].close()

    def raw(self, name: str) -> torch.Tensor:
        dtype, shape = self.spec[name]
        if name in self.targets and self._expanded is not None:
            return self._read_expanded(name)
        if name in self.targets:
            return expand(self._factor(f"{name}.lora_A"), self._factor(f"{name}.lora_B"), self.scales[name])
        t = torch.zeros(shape, dtype=torch_dtypes()[dtype])
        return t.neg_() if t.is_floating_point() else t

    def scratch(self):
        return torch.empty(0, dtype=torch.uint8)

    def read_into(self, name: str, buf) -> torch.Tensor:
        """``self[name]`` in fresh memory (an expansion is made, not read: ``buf`` is not used)."""
        return self[name]

    def pair(self, name: str):
        """(A, B, scale) of the target ``name`` as the file holds them; None for another tensor, or once clipped.
        core/scores.py similarity compares a tensor that has them in factor space, its product never formed."""
        if name not in self.targets or self.scale is not None:
            return None
        return self._factor(f"{name}.lora_A"), self._factor(f"{name}.lora_B"), self.scales[name]

    def factor_pairs(self):
        """(target, A, B, scale) in name order, as the file holds them."""
        for target in sorted(self.targets):
            yield (target, self._factor(f"{target}.lora_A"), self._factor(f"{target}.lora_B"),
                   self.scales[target])


def factor_tensors(factors: dict) -> dict[str, torch.Tensor]:
    """The file's tensors from {target: (A, B, scale)}."""
    out = {}
    for target, (A, B, scale) in factors.items():
        out[f"{target}.lora_A"] = A.detach().to("cpu").contiguous()
        out[f"{target}.lora_B"] = B.detach().to("cpu").contiguous()
        out[f"{target}.lora_scale"] = torch.tensor([float(scale)], dtype=torch.float32)
    return out


class LoraFile:
    """A participant's lora delta, checked against the base's spec, written as a PR's delta file."""

    declared = {"kind": "lora"}  # what submission.json declares for it: the lora kind's (lora.py) fields

    def __init__(self, factors: dict, base_spec: dict, max_rank: int, label: str = "lora delta"):
        tensors = factor_tensors(factors)
        spec = {k: ({v: k2 for k2, v in torch_dtypes().items()}[t.dtype], tuple(t.shape)) for k, t in tensors.items()}
        self.targets = check_layout(spec, base_spec, max_rank, label)
        for target, (A, B, scale) in factors.items():
            try:
                check_scale(target, float(scale))
            except ValueError as exc:
                raise InvalidWeightsError(f"{label}: {exc}") from None
            for part, t in (("A", A), ("B", B)):
                if not bool(torch.isfinite(t).all()):
                    raise InvalidWeightsError(f"{label}: tensor {target!r}: factor {part} holds NaN or Inf values")
        if not any(bool(B.any()) and bool(A.any()) for A, B, _ in factors.values()):
            raise InvalidWeightsError(f"{label}: every factor pair is zero: the update would change nothing")
        self.tensors = tensors

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def write(self, out: Path) -> tuple[str, str]:
        """(md5, sha256) of the file written at ``out``."""
        return save_atomic(self.tensors, out, durable=False, hashed=True)


def dense_bytes(model_spec: dict) -> int:
    """Bytes of the dense float32 delta of this model (what a lora file is compared with)."""
    return sum(4 * math.prod(shape) for _, shape in model_spec.values())
