"""A pretrained `charlm` genesis: trained centrally on the corpus, built once per machine and cached.

Usage:
    path = pretrained_genesis(CharLM())       # a .safetensors file: `woolf init --weights PATH`
    path = pretrained_genesis(CharLM(), steps=PRETRAIN_STEPS, cache=Path("/tmp/c"))

The model a real ledger continues from already exists; this stands in for it
at `charlm`'s size: ``steps`` AdamW steps at ``PRETRAIN_LR`` (whatever rate
the ledger then trains at) from the seeded genesis on every seventh file
of the training pool (never the held-out benchmark), one torch thread, a
fixed seed. It is **built, not shipped**: the corpus is the
local Python's own standard library (corpus.py), so a checkpoint shipped
from another Python would have been trained on other text, and a binary in
the source tree could not be reviewed. Building takes about half a minute
on one CPU core; the file is cached under ``$WOOLF_CACHE`` or
``$XDG_CACHE_HOME/goodwoolf`` (default ``~/.cache/goodwoolf``), named by a
hash of everything that determines it (model shape, optimizer, steps, seed,
the corpus's file list, torch's version), so another configuration builds
its own. Nothing is downloaded. Written by temp file and rename; a cached
file is read back with the size limits and spec check of `woolf init
--weights`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import torch

from woolf.storage.weights import save_atomic
from woolf.workloads import corpus
from woolf.workloads.base import TrainData

PRETRAIN_STEPS = 1000
PRETRAIN_SEED = 12345
PRETRAIN_LR = 3e-3  # the rate the model was pretrained at; a ledger continuing it sets its own (workload.params.lr)


def cache_dir() -> Path:
    if os.environ.get("WOOLF_CACHE"):
        return Path(os.environ["WOOLF_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "goodwoolf"


def pretraining_files() -> list[str]:
    return corpus.pool_files()[::7]


def _key(wl, steps: int) -> str:
    files = pretraining_files()
    what = {"fingerprint": wl.fingerprint(), "lr": PRETRAIN_LR, "batch": wl.batch_size, "steps": steps,
            "seed": PRETRAIN_SEED, "torch": torch.__version__.split("+")[0],
            "files": hashlib.sha256("\n".join(files).encode()).hexdigest(),
            "bytes": sum(len(corpus.read(f)) for f in files)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def build(wl, steps: int = PRETRAIN_STEPS) -> dict[str, torch.Tensor]:
    """The pretrained weights themselves (no cache)."""
    files = pretraining_files()
    data = TrainData([corpus.read(f) for f in files], "pretraining: every 7th pool file", files)
    central = copy.copy(wl)  # the ledger's own training settings (a fresh optimizer's warm-up) are not its
    central.optimizer_warmup = 0
    central.lr = PRETRAIN_LR
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same arithmetic on every build on this machine
    try:
        weights, _ = central.train(central.genesis(0), data, steps, seed=PRETRAIN_SEED)
    finally:
        torch.set_num_threads(threads)
    return weights


def pretrained_genesis(wl, steps: int = PRETRAIN_STEPS, cache: Path | None = None, progress=None) -> Path:
    """The cached checkpoint's path, building it first when it is not there."""
    path = Path(cache or cache_dir()) / f"{wl.name}-pretrained-{steps}-{_key(wl, steps)}.safetensors"
    if not path.is_file():
        if progress:
            progress(f"building the pretrained genesis once ({steps} steps on the corpus; cached at {path})")
        save_atomic(build(wl, steps), path, metadata={"woolf": f"{wl.fingerprint()} pretrained {steps} steps"})
    return path
