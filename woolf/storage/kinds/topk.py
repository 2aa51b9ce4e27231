"""The `topk` kind: chunked top-k parts (woolf/core/compress.py), checked, then expanded to the dense update.

Usage:
    spec = TOPK.spec(declared)                                    # CompressSpec(chunk, k, bits)
    TOPK.size_bound(declared, model_spec, limits)                 # 8 + a header's slack + the parts' bytes
    delta = TOPK.open(path, declared, spec, limits)               # {name: tensor in the model's dtype}
    entries = TOPK.sparse_entries(path, declared, spec, limits)   # {name: (flat positions, float32 values)}
    md5, sha256 = TOPK.write(delta, path, declared, parts)        # the parts (made from ``delta`` when None)

A top-k file's header must be exactly the parts the model and the declared chunk/k/bits imply
(names, dtypes, shapes) before a byte of data is read; then every offset, level and scale is
checked, and only then is the dense delta built (the model's size, never more). Any problem is an
InvalidWeightsError naming it. Its parameters are exactly chunk, k and bits (protocol/compress_spec.py).
"""

from __future__ import annotations

from pathlib import Path

from woolf.errors import InvalidWeightsError
from woolf.protocol.compress_spec import CompressSpec, spec_from_declared
from woolf.protocol.config import LimitsConfig
from woolf.storage.kinds.base import DeltaKind, Derivation
from woolf.storage.kinds.dense import trained_minus_base

HEADER_SLACK = 4096  # a top-k file's header (three entries) is ~200 bytes


class TopkKind(DeltaKind):
    name = "topk"
    params = ("chunk", "k", "bits")
    bound_words = " with the declared k"

    def spec(self, declared: dict, label: str = "delta") -> CompressSpec:
        """The CompressSpec ``declared`` names; InvalidWeightsError when its parameters are not one."""
        try:
            return spec_from_declared(declared)
        except (ValueError, TypeError) as exc:
            raise InvalidWeightsError(f"{label}: bad topk parameters: {exc}") from None

    def check_declared(self, declared: dict, params: tuple[str, ...]) -> None:
        try:
            spec_from_declared(declared)
        except (ValueError, TypeError) as exc:
            raise InvalidWeightsError(f"{self.name} delta: {exc}") from None

    def size_bound(self, declared: dict, model_spec: dict, limits: LimitsConfig) -> int:
        from woolf.core.compress import parts_bytes  # deferred: loads torch

        return 8 + HEADER_SLACK + parts_bytes(self.spec(declared), model_spec)

    def open(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta"):
        return self.load(path, declared, model_spec, limits, label)

    def load(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta",
             finite: bool = True, on_block=None):
        from woolf.core.compress import expand  # deferred: loads torch
        from woolf.storage.weights import torch_dtypes  # deferred: loads numpy

        spec = self.spec(declared, label)
        parts = _parts(path, spec, model_spec, limits, label, on_block)
        try:
            return expand(parts, spec, model_spec, {n: torch_dtypes()[dt] for n, (dt, _) in model_spec.items()})
        except ValueError as exc:
            raise InvalidWeightsError(f"{label}: {exc}") from None

    def write(self, delta, path: Path, declared: dict, parts: dict | None = None) -> tuple[str, str]:
        from woolf.storage.weights import save_atomic  # deferred: loads numpy

        if parts is None:
            from woolf.core.compress import compress  # deferred: loads torch

            parts = compress(delta, self.spec(declared))
        return save_atomic(parts, path, durable=False, hashed=True)

    def sparse_entries(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig,
                       label: str = "delta", check: bool = True) -> dict:
        """Never dense: rebuild adds the kept values alone (core/compress.py apply_sparse_). ``check=False``:
        bytes whose sha256 is a merged submission's (core/compress.py entries)."""
        from woolf.core.compress import entries  # deferred: loads torch

        spec = self.spec(declared, label)
        parts = _parts(path, spec, model_spec, limits, label)
        try:
            return {name: (where, vals) for name, _, where, vals in entries(parts, spec, model_spec, check)}
        except ValueError as exc:
            raise InvalidWeightsError(f"{label}: {exc}") from None

    def proof_derive(self, out: dict, d: Derivation) -> tuple[dict, str | None]:
        """The parts of (trained - base + the residual going in), and the digest of the residual left."""
        import torch  # deferred: torch

        from woolf.core.chain import component_digest  # deferred: torch
        from woolf.core.compress import compress, expand  # deferred: torch
        from woolf.storage.weights import spec_of  # deferred: numpy

        delta = trained_minus_base(out, d)
        spec = spec_from_declared(d.declared)
        total = {k: v.to(torch.float32) + (d.residual_in[k] if d.residual_in is not None else 0.0)
                 for k, v in delta.items()}
        parts = compress(total, spec)
        sent = expand(parts, spec, spec_of(delta), {k: v.dtype for k, v in delta.items()})
        kept = {k: total[k] - sent[k].to(torch.float32) for k in total}
        return parts, component_digest(kept)


def _parts(path: Path, spec: CompressSpec, model_spec: dict, limits: LimitsConfig, label: str, on_block=None):
    """The file's three parts, their header exactly what ``spec`` implies for this model, then loaded."""
    from woolf.core.compress import parts_spec  # deferred: loads torch
    from woolf.storage.weights import compare_spec, load_checked, read_spec  # deferred: loads numpy

    want = parts_spec(spec, model_spec)
    got = read_spec(path, limits, label)
    try:
        compare_spec(got, want, f"{label} (topk chunk={spec.chunk} k={spec.k} bits={spec.bits})")
    except InvalidWeightsError as exc:
        raise InvalidWeightsError(f"{exc.message}: more or other data than the declared k") from None
    return load_checked(path, limits, expect=want, label=label, on_block=on_block)
