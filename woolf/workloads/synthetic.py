"""Workload `synthetic`: a model of any size with trivial training, for ledger benchmarks.

Usage:
    wl = Synthetic(n_params=10_000_000, n_tensors=8)
    w0 = wl.genesis(); w1, _ = wl.train(w0, wl.default_data("a", 0), steps=1)   # w1 is w0, trained in place
    wl.evaluate(w1, wl.benchmark_bytes())        # {"loss": mean squared distance to a fixed target}
    wl.FEATURES                                  # empty: the base protocol only (features.py)

Training adds seeded noise and evaluation is one pass over the weights, so a
benchmark measures the ledger (git, DVC, hashing, arithmetic, transfer), not a model.
"""

from __future__ import annotations

import hashlib

import torch

from woolf.workloads.base import TrainData


class Synthetic:
    name = "synthetic"
    FEATURES: frozenset[str] = frozenset()  # the base protocol only: no state, no following

    def __init__(self, n_params: int = 1_000_000, n_tensors: int = 8, step_size: float = 1e-3):
        self.n_params, self.n_tensors, self.step_size = n_params, n_tensors, step_size

    def _shapes(self) -> list[tuple[str, int]]:
        per = self.n_params // self.n_tensors
        return [(f"layer{i:03d}.weight", per) for i in range(self.n_tensors)]

    def genesis(self, seed: int = 0) -> dict[str, torch.Tensor]:
        return dict(self._tensors(seed))

    def _tensors(self, seed: int):
        """genesis(seed)'s tensors one at a time (the same values, one tensor in memory)."""
        g = torch.Generator().manual_seed(seed)
        for name, n in self._shapes():
            yield name, torch.randn(n, generator=g)

    def benchmark_bytes(self) -> bytes:
        return b"synthetic benchmark: the target is genesis(seed=1)\n"

    def default_data(self, contributor: str, base_version: int) -> TrainData:
        return TrainData([f"{contributor}:{base_version}".encode()], f"synthetic:{contributor}@v{base_version}")

    def data_from_path(self, path: str) -> TrainData:
        return TrainData([path.encode()], path)

    @torch.no_grad()
    def train(self, weights, data: TrainData, steps: int, device: str = "cpu", seed: int = 0, progress=None):
        """A step toward genesis(1) plus seeded noise, written into ``weights``' own tensors (float32,
        contiguous; others get new ones): the trained weights ARE the given dict, so training holds one
        model, not two (a benchmark workload; `woolf train` takes the base's metrics from the version's
        record). The values are those of ``v + s * (t - v) + 1e-4 * noise`` computed out of place."""
        key = int.from_bytes(hashlib.sha256(data.texts[0] + bytes([seed % 256])).digest()[:4], "little")
        g = torch.Generator().manual_seed(key)
        # genesis(1) one tensor at a time when the weights come in the model's order (as loaded):
        # no model-sized target beside them
        in_order = list(weights) == [name for name, _ in self._shapes()]
        if in_order:
            targets = (t for _, t in self._tensors(1))
        else:
            full = self.genesis(1)
            targets = (full.pop(k) for k in list(weights))
        for (k, v), t in zip(list(weights.items()), targets, strict=True):
            # a step toward the target plus noise: evaluation sees honest progress
            step = torch.sub(t, v, out=t) if t.dtype == v.dtype and t.shape == v.shape else t - v
            step.mul_(self.step_size * steps).add_(v)  # v + s*(t - v): IEEE addition commutes
            step.add_(torch.randn(v.shape, generator=g).mul_(1e-4))
            if v.dtype == step.dtype and v.is_contiguous():
                v.copy_(step)
            else:
                weights[k] = step
            del step, t
        return weights, {"steps": steps, "seconds": 0.0, "data": data.source}

    @torch.no_grad()
    def evaluate(self, weights, benchmark: bytes, device: str = "cpu") -> dict[str, float]:
        # the target one tensor at a time, the difference written into it: evaluation holds one
        # tensor beside the weights, never a model copy (the same operations, the same result)
        total = sum(float(torch.sub(weights[k], t, out=t).pow_(2).sum()) for k, t in self._tensors(1))
        return {"loss": total / self.n_params}
