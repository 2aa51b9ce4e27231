"""What each delta kind gives a proof of training: how its training runs, and how its delta follows from the end.

Usage:
    kind = proof_kind("topk")                        # by submission.json's delta.kind
    out = kind.train(wl, skeleton, data, recipe, device=..., hook=..., progress=..., extra={...})
    tensors, residual_out = kind.derive(out, Derivation(base=..., shift=..., residual_in=..., ...))

Each kind answers two questions for the audit (woolf/validator/audit_proof.py) and the participant's
answers (woolf/participant/proof.py): which training produced it (the whole model, or adapters over
the frozen version) and what file tensors its final state gives, exactly as `woolf submit` makes
them: dense `end - base` (float32 arithmetic, in the base's dtype, after the last follow's shift),
top-k the compressed `delta + residual_in` (and the residual left), LoRA the adapters' factor pairs.
A small interface here until the delta kinds have one home (storage/kinds/); then these methods
move into each kind's module.
"""

from __future__ import annotations

from dataclasses import dataclass

from woolf.protocol.lora_spec import parse_lora


@dataclass
class Derivation:
    """What a delta is derived with, besides the final state (all tensors torch, on the CPU)."""

    base: dict  # the PR's base version's weights
    shift: dict | None = None  # the last follow's shift (new version - old), applied after the loop
    residual_in: dict | None = None  # top-k: the error-feedback residual the delta went out with
    declared: dict | None = None  # submission.json's delta (its kind's parameters)


class DenseProof:
    name = "dense"
    trains_adapters = False

    def train(self, wl, skeleton, data, recipe: dict, *, device, hook, progress, extra: dict):
        return wl.train(skeleton, data, recipe["steps"], device=device, seed=recipe["seed"], progress=progress,
                        proof=hook, **extra)[0]

    def dense(self, out: dict, d: Derivation) -> dict:
        """trained - base as `woolf submit` computes it (the last follow's shift first, as `woolf train`)."""
        import torch  # deferred: torch

        from woolf.core.merge import compute_delta  # deferred: torch

        trained = out if d.shift is None else {k: (v.to(torch.float32) + d.shift[k]).to(v.dtype)
                                               for k, v in out.items()}
        return compute_delta(trained, d.base)

    def derive(self, out: dict, d: Derivation) -> tuple[dict, str | None]:
        return self.dense(out, d), None


class TopkProof(DenseProof):
    name = "topk"

    def derive(self, out: dict, d: Derivation) -> tuple[dict, str | None]:
        import torch  # deferred: torch

        from woolf.core.chain import component_digest  # deferred: torch
        from woolf.core.compress import compress, expand, spec_from_declared  # deferred: torch
        from woolf.storage.weights import spec_of  # deferred: numpy

        delta = self.dense(out, d)
        spec = spec_from_declared(d.declared)
        total = {k: v.to(torch.float32) + (d.residual_in[k] if d.residual_in is not None else 0.0)
                 for k, v in delta.items()}
        parts = compress(total, spec)
        sent = expand(parts, spec, spec_of(delta), {k: v.dtype for k, v in delta.items()})
        kept = {k: total[k] - sent[k].to(torch.float32) for k in total}
        return parts, component_digest(kept)


class LoraProof:
    name = "lora"
    trains_adapters = True

    def train(self, wl, skeleton, data, recipe: dict, *, device, hook, progress, extra: dict):
        return wl.train_lora(skeleton, data, recipe["steps"], parse_lora(recipe["lora"]), device=device,
                             seed=recipe["seed"], progress=progress, proof=hook)[0]

    def derive(self, out: dict, d: Derivation) -> tuple[dict, str | None]:
        from woolf.storage.lora import factor_tensors  # deferred: torch

        return factor_tensors(out), None


KINDS = {k.name: k for k in (DenseProof(), TopkProof(), LoraProof())}


def proof_kind(name: str):
    """The kind's proof parts; KeyError for a kind that has none."""
    return KINDS[name]
