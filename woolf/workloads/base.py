"""The workload interface and how a ledger's config selects one.

Usage:
    wl = load_workload(cfg.workload)              # built-in name or "pkg.module:object"
    weights = wl.genesis(seed=0)
    new, summary = wl.train(weights, data=wl.default_data("alice", 3), steps=60)
    wl.evaluate(new, benchmark_bytes)             # {"loss": ...}

A workload is any object with these methods; ``params`` from the config are
passed to its constructor. Training may instead be an external command (see
command.py); evaluation always runs in-process with the code on ``main``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from woolf.config import WorkloadConfig
from woolf.errors import ConfigError

Progress = Callable[[int, int, float], None]  # (step, total, loss)


@dataclass
class TrainData:
    """What a participant trains on: named files of text, and where they came from."""

    texts: list[bytes]
    source: str  # "shard:<contributor>@v<base>" or a user path
    files: list[str] = field(default_factory=list)


class Workload(Protocol):
    name: str

    def genesis(self, seed: int = 0) -> dict[str, torch.Tensor]: ...

    def benchmark_bytes(self) -> bytes: ...

    def default_data(self, contributor: str, base_version: int) -> TrainData: ...

    def data_from_path(self, path: str) -> TrainData: ...

    def train(self, weights: dict[str, torch.Tensor], data: TrainData, steps: int,
              device: str = "cpu", seed: int = 0,
              progress: Progress | None = None) -> tuple[dict[str, torch.Tensor], dict]: ...

    def evaluate(self, weights: dict[str, torch.Tensor], benchmark: bytes,
                 device: str = "cpu") -> dict[str, float]: ...


BUILTIN = {"charlm": "woolf.workloads.charlm:CharLM", "synthetic": "woolf.workloads.synthetic:Synthetic",
           "transformers": "woolf.workloads.hf:Transformers"}


def load_workload(cfg: WorkloadConfig) -> Workload:
    target = BUILTIN.get(cfg.name, cfg.name)
    if ":" not in target:
        raise ConfigError(
            f"ledger/woolf.toml: workload.name {cfg.name!r} is neither built in "
            f"({', '.join(BUILTIN)}) nor 'package.module:object'"
        )
    module_name, _, attr = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"ledger/woolf.toml: cannot load workload {target!r}: {exc}") from None
    try:
        return obj(**cfg.params)
    except TypeError as exc:
        raise ConfigError(f"ledger/woolf.toml: workload.params do not fit {target}: {exc}") from None


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        from woolf.errors import UsageError

        raise UsageError("--device cuda: no CUDA device is available", hint="use --device auto or cpu")
    return device
