"""The `lora` kind: factor pairs per target tensor (lora_file.py), read as the dense update they expand to.

Usage:
    delta = LORA.open(path, declared, model_spec, limits)   # LoraTensors: every rule checked now, targets
                                                            # expanded when read, other tensors -0.0
    LORA.expand_ahead(delta, directory)                     # every target expanded once, into an unnamed file
    md5, sha256 = LORA.write(LoraFile(factors, spec, max_rank), path, declared)
    LORA.accepted_by(cfg.delta.accept)                      # does this ledger take LoRA PRs?

Before download its declared size is held to a dense delta's bound (``limits.max_delta_bytes``
bounds it further, and ``limits.max_lora_rank`` its rank, checked when it is opened). A lora delta is
hashed whole before it is opened (no reader hashes it on the way), and never kept in memory whole:
holding it would mean expanding every target. An audit replays its adapters' training (``proof_train``:
the workload's ``train_lora``) and compares the factor pairs it ends with (``proof_derive``).
"""

from __future__ import annotations

from pathlib import Path

from woolf.protocol.config import LimitsConfig
from woolf.protocol.lora_spec import parse_lora
from woolf.storage.kinds.base import DeltaKind, Derivation
from woolf.storage.kinds.dense import dense_bound


class LoraKind(DeltaKind):
    name = "lora"
    lazy = True
    trains_adapters = True

    def size_bound(self, declared: dict, model_spec: dict, limits: LimitsConfig) -> int:
        return dense_bound(model_spec, limits)

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
