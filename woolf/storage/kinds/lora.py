"""The `lora` kind: factor pairs per target tensor (lora_file.py), read as the dense update they expand to.

Usage:
    delta = LORA.open(path, declared, model_spec, limits)   # LoraTensors: every rule checked now, targets
                                                            # expanded when read, other tensors -0.0
    LORA.expand_ahead(delta, directory)                     # every target expanded once, into an unnamed file
    md5, sha256 = LORA.write(LoraFile(factors, spec, max_rank), path, declared)
    LORA.accepted_by(cfg.delta.accept)                      # does this ledger take LoRA PRs?

Before download its declared size is held to a dense delta's bound, and to the most bytes of factors
whose expansion fits ``limits.max_lora_expand`` (core/lora.py most_factor_bytes; ``limits.max_delta_bytes``
bounds it further). Once its header is read, its ranks (``limits.max_lora_rank``, min(rows, cols)) and
its expansion's multiply-adds (``limits.max_lora_expand``) are checked before any factor is. A lora delta is
hashed whole before it is opened (no reader hashes it on the way), and never kept in memory whole:
holding it would mean expanding every target. An audit replays its adapters' training (``proof_train``:
the workload's ``train_lora``) and compares the factor pairs it ends with (``proof_derive``).
"""

from __future__ import annotations

import math
from pathlib import Path

from woolf.protocol.config import LimitsConfig
from woolf.protocol.lora_spec import parse_lora
from woolf.storage.kinds.base import DeltaKind, Derivation
from woolf.storage.kinds.dense import dense_bound


class LoraKind(DeltaKind):
    name = "lora"
    lazy = True
    trains_adapters = True
    bound_words = " whose expansion is within limits.max_lora_expand"

    def size_bound(self, declared: dict, model_spec: dict, limits: LimitsConfig) -> int:
        from woolf.core.lora import most_factor_bytes  # deferred: loads torch

        shapes = [tuple(shape) for dtype, shape in model_spec.values() if dtype == "F32" and len(shape) == 2]
        factors = most_factor_bytes(shapes, limits.max_lora_rank, limits.max_lora_expand)
        within = 8 + limits.max_header_bytes + 4 * len(shapes) + factors  # header, scales, factors
        return min(dense_bound(model_spec, limits), math.ceil(within)) if math.isfinite(within) \
            else dense_bound(model_spec, limits)

    def open(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta"):
        from woolf.storage.kinds.lora_file import LoraTensors  # deferred: loads torch

        return LoraTensors.open(path, limits, expect=model_spec, label=label)

    def load(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta",
             finite: bool = True, on_block=None):
        if on_block is not None:
            raise ValueError("a lora delta is hashed before it is opened")
        return self.open(path, declared, model_spec, limits, label)

    def held_whole(self, size: int, budget: int) -> bool:
        return False  # its product, one target at a time, never kept

    def expand_ahead(self, delta, directory: Path) -> None:
        delta.expand_once(directory)

    def write(self, delta, path: Path, declared: dict, parts: dict | None = None) -> tuple[str, str]:
        return delta.write(path)  # a LoraFile: factors checked as a validator checks them

    def proof_train(self, wl, skeleton, data, recipe: dict, *, device, hook, progress, extra: dict):
        return wl.train_lora(skeleton, data, recipe["steps"], parse_lora(recipe["lora"]), device=device,
                             seed=recipe["seed"], progress=progress, proof=hook)[0]

    def proof_derive(self, out: dict, d: Derivation) -> tuple[dict, str | None]:
        from woolf.storage.kinds.lora_file import factor_tensors  # deferred: loads torch

        return factor_tensors(out), None
