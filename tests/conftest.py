"""Shared fixtures: real ledgers, bare hubs and clones in temp dirs.

Usage (in a test):
    def test_x(network):
        alice = network.clone("alice")
        network.train_submit(alice, "alice")
"""

from __future__ import annotations

import atexit
import compileall
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.ledger_template import restore_ledger
from tests.reaper import _no_child_left_behind, pytest_configure, pytest_unconfigure  # noqa: F401  (no child left behind)
from woolf.git.keys import configure, create_key
from woolf.git.repo import Git, clean_env
from woolf.hub.create import init_hub
from woolf.ledger.ledger import Ledger
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.protocol.signers import signer_line

# This machine's image sets PYTHONDONTWRITEBYTECODE=1: every Python a test starts (each push runs the
# hub's hooks, each woolf command a child) compiled woolf's modules from source, and pytest rewrote every
# test module in every worker. woolf is byte-compiled once here (children read it; `woolf hub init`
# does the same for its hooks), and this process may cache the test modules it rewrites.
compileall.compile_dir(str(Path(__file__).parents[1] / "woolf"), quiet=2)
sys.dont_write_bytecode = False

torch.set_num_threads(1)
# ... and every process a test starts (woolf commands, validators, examples, benchmarks' children) trains
# and evaluates tiny models on one thread: two xdist workers on two cores, each child spinning a second
# OpenMP thread, spent CPU waiting for each other (a child that asks for threads still gets them)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# The tests' own raw git commits need an identity on a machine with no ~/.gitconfig (a fresh CI box);
# the product's commits name theirs themselves, and strip GIT_* from what they inherit (clean_env).
IDENTITY = {f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
            for what, value in (("NAME", "woolf tests"), ("EMAIL", "tests@example.invalid"))}
for _k, _v in IDENTITY.items():
    os.environ.setdefault(_k, _v)

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


# Signed test ledgers: "work" (the creator) is maintainer and validator; clones named like a
# validator sign as validators, clones named like a listed contributor sign their submissions,
# any other clone has no key (an unsigned contributor). Keys are made once per test process.
VALIDATORS = ("val", "val2", "val3", "val4", "v1", "v2", "v3", "validator")
CONTRIBUTORS = ("alice", "bob", "carol")
_KEYS: dict[str, Path] = {}
_KEY_DIR = Path(tempfile.mkdtemp(prefix="woolf-test-keys-"))
atexit.register(shutil.rmtree, _KEY_DIR, True)


def key_for(name: str) -> Path:
    if name not in _KEYS:
        _KEYS[name] = create_key(_KEY_DIR / name, name)[0]
    return _KEYS[name]


def signer_lines() -> list[str]:
    pub = lambda n: Path(f"{key_for(n)}.pub").read_text()  # noqa: E731
    return ([signer_line(v, pub(v), ["validator"]) for v in VALIDATORS]
            + [signer_line(c, pub(c)) for c in CONTRIBUTORS])


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          env=clean_env(IDENTITY)).stdout.decode().strip()


_E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items):
    """Everything under tests/e2e/ is marked e2e: `pytest -m "not e2e"` is the suite less those. They
    run first, so pytest-xdist starts the longest tests early and the short ones fill in behind them
    (in collection order one of them would start last and keep one worker busy alone)."""
    for item in items:
        if _E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: _E2E not in item.path.parents)  # stable: file order otherwise kept


@dataclass
class Network:
    root: Path
    work: Ledger
    hub: Path
    signed: bool = True

    def clone(self, name: str, key: str | None = None) -> Ledger:
        """A clone in root/<name>, signing with the key of ``key`` (default: its name's, if listed)."""
        dest = self.root / name
        git("clone", "-q", str(self.hub), str(dest), cwd=self.root)
        git("config", "user.name", name, cwd=dest)
        key = key or name
        if self.signed and (key in VALIDATORS or key in CONTRIBUTORS):
            configure(Git(dest), key_for(key))
        return Ledger.open(dest)

    def train_submit(self, ledger: Ledger, who: str, steps: int = 20, seed: int = 0, **kw) -> dict:
        train(ledger, TrainOptions(steps=steps, contributor=who, seed=seed, device="cpu"))
        return submit(ledger, SubmitOptions(contributor=who, **kw))


def signing_for(signed: bool) -> dict:
    """`Ledger.init`'s signing keywords for a test ledger: "work" signs, every listed name is allowed."""
    return {"signing_key": key_for("work"), "signer": "work", "extra_signers": signer_lines()} if signed else {}


def make_network(root: Path, signed: bool = True, **overrides) -> Network:
    """A ledger in root/work (signed unless signed=False) with its storage in root/storage, restored
    from this process's template (tests/ledger_template.py), and its hub made by `woolf hub init`."""
    settings = {**SMALL, **{k: str(v) for k, v in overrides.items()}}
    work = restore_ledger(root, settings, signing_for(signed))
    hub = root / "hub.git"
    init_hub(hub, work.root)
    git("remote", "add", "origin", str(hub), cwd=work.root)
    return Network(root, work, hub, signed)


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


@pytest.fixture
def cli(capsys, monkeypatch):
    """``cli(*args, cwd=..., env=...)``: the CLI's one exit path (woolf.cli.main.main) in this process,
    started in ``cwd`` with ``env`` set, as run_cli starts it in a subprocess; it returns what run_cli
    does (returncode, stdout, stderr). For tests of what a command does and says; a test of the
    process itself (signals, the console script, interpreter start-up, hooks) uses run_cli."""
    from woolf.cli.main import main

    def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
        with monkeypatch.context() as m:
            m.chdir(cwd)
            for key, value in (env or {}).items():
                m.setenv(key, value)
            capsys.readouterr()
            code = main(list(args))
            out = capsys.readouterr()
        return subprocess.CompletedProcess(["woolf", *args], code, out.out, out.err)

    return run
