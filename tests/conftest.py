"""Shared fixtures: real ledgers, bare hubs and clones in temp dirs.

Usage (in a test):
    def test_x(network):
        alice = network.clone("alice")
        network.train_submit(alice, "alice")
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from woolf.contribute import submit, train
from woolf.ledger import Ledger
from woolf.storage.git import clean_env

torch.set_num_threads(1)
os.environ.setdefault("DVC_NO_ANALYTICS", "1")

# A tiny model keeps every training step and evaluation in milliseconds.
SMALL = {
    "workload.params.d_model": "32",
    "workload.params.n_layer": "1",
    "workload.params.context": "32",
    "workload.params.batch_size": "8",
    "workload.params.benchmark_bytes": "4096",
    "workload.params.shard_files": "2",
    "workload.steps": "20",
}


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          env=clean_env()).stdout.decode().strip()


@dataclass
class Network:
    root: Path
    work: Ledger
    hub: Path

    def clone(self, name: str) -> Ledger:
        dest = self.root / name
        git("clone", "-q", str(self.hub), str(dest), cwd=self.root)
        git("config", "user.name", name, cwd=dest)
        return Ledger.open(dest)

    def train_submit(self, ledger: Ledger, who: str, steps: int = 20, seed: int = 0, **kw) -> dict:
        train(ledger, steps=steps, contributor=who, seed=seed, device="cpu")
        return submit(ledger, contributor=who, **kw)


def make_network(root: Path, **overrides) -> Network:
    settings = {**SMALL, **{k: str(v) for k, v in overrides.items()}}
    work = Ledger.init(root / "work", storage=str(root / "storage"), overrides=settings)
    hub = root / "hub.git"
    git("clone", "-q", "--bare", str(work.root), str(hub), cwd=root)
    git("remote", "add", "origin", str(hub), cwd=work.root)
    return Network(root, work, hub)


@pytest.fixture
def network(tmp_path) -> Network:
    return make_network(tmp_path, **{"policy.min_improvement": "-10"})


@pytest.fixture
def make_net(tmp_path):
    def factory(**overrides) -> Network:
        return make_network(tmp_path, **overrides)

    return factory


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    """The real console entry point in a subprocess."""
    return subprocess.run([sys.executable, "-m", "woolf", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=timeout)
