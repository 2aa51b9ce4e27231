"""What the built-in text workloads share: the standard library's sources as data, and a
learning rate that warms up once over the ledger's global steps.

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
