"""What the built-in text workloads share: the standard library's sources as data, and a
learning rate that warms up once over the ledger's global steps, and over each optimizer's first steps.

Usage:
    class MyWorkload(TextCorpus):       # needs self.benchmark_size, shard_files, lr, warmup_steps
        ...
"""

from __future__ import annotations

from woolf.workloads import corpus
from woolf.workloads.base import TrainData


class TextCorpus:
    benchmark_size: int
    shard_files: int
    lr: float
    warmup_steps: int
    optimizer_warmup: int = 0  # linear warm-up over each AdamW's own first steps (0: off)

    def benchmark_bytes(self) -> bytes:
        return corpus.benchmark_text(self.benchmark_size)

    def default_data(self, contributor: str, base_version: int) -> TrainData:
        files = corpus.assign_shard(contributor, base_version, self.shard_files)
        return TrainData([corpus.read(f) for f in files], f"shard:{contributor}@v{base_version}", files)

    def lr_at(self, global_step: int) -> float:
        """The learning rate at the ledger's global progress (warm-up once, not per contribution)."""
        if self.warmup_steps and global_step < self.warmup_steps:
            return self.lr * (global_step + 1) / self.warmup_steps
        return self.lr

    def opt_factor(self, opt_step: int, cap: int | None = None) -> float:
        """A fresh AdamW's first steps are about lr * sign(g) each (bias correction): on a trained model,
        a spike the gate refuses. ``optimizer_warmup`` ramps the rate over the optimizer's own first
        steps, counted across contributions when its state persists (0: off). ``cap``: the ramp is at
        most that many steps (a contribution's third: short contributions are not all warm-up)."""
        ramp = min(self.optimizer_warmup, cap) if cap else self.optimizer_warmup
        if ramp and opt_step < ramp:
            return (opt_step + 1) / ramp
        return 1.0
