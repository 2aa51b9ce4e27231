"""The workload interface and how a ledger's config selects one.

Usage:
    wl = load_workload(cfg.workload)              # built-in name or an installed entry point
    weights = wl.genesis(seed=0)
    new, summary = wl.train(weights, data=wl.default_data("alice", 3), steps=60)
    wl.evaluate(new, benchmark_bytes)             # {"loss": ...}
    train_summary(steps, seconds, losses, tokens, data, optimizer="fresh")   # what train() returns beside weights
    enable_checkpointing(model)                   # activations recomputed in backward (transformers models)
    features_of(wl)                               # what more it declares (features.py)

A workload is any object with these methods, and a ``FEATURES`` set naming what more it
offers (woolf/workloads/features.py: state_dir, global_step, follow, fingerprint, bind,
data_parallel, in_place, distributed, windows), which callers check before passing or calling more. ``params`` from the
config are passed to its constructor as data (JSON-like values only). The config names a
workload, never code: a built-in, or an entry point that an installed package
registers in the group ``goodwoolf.workloads`` (installing it is the
participant's own decision). A ``module:object`` string is refused. Training may instead be an external command (see
command.py); evaluation always runs in-process with the code on ``main``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Protocol

import torch

from woolf.errors import ConfigError, UsageError
from woolf.protocol.config import WorkloadConfig

Progress = Callable[[int, int, float], None]  # (step, total, loss)


@dataclass
class TrainData:
    """What a participant trains on: named files of text, and where they came from."""

    texts: list[bytes]
    source: str  # "shard:<contributor>@v<base>", or "private" for a participant's own files (userdata.py)
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # `--data DIR`: what was left out, and why (userdata.py)


class Workload(Protocol):
    name: str
    # optional features, by the names in features.py; train() gets state_dir=, global_step=,
    # follow= only when they are declared. Undeclared (an older workload): what it has.
    FEATURES: frozenset[str]

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
ENTRY_POINT_GROUP = "goodwoolf.workloads"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _installed(name: str):
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep
    return None


def check_workload_name(name: str, where: str = "ledger/woolf.toml: workload.name"):
    """The installed entry point ``name`` resolves to (None: a built-in), or a ConfigError that
    names ``where`` it came from (`woolf init --workload`, or the ledger's config)."""
    if not _NAME.match(name):
        raise ConfigError(
            f"{where} {name!r} names code; a ledger's config cannot carry code",
            hint=f"use a built-in ({', '.join(BUILTIN)}) or the name of an entry point that an installed "
                 f"package registers in the group {ENTRY_POINT_GROUP!r}")
    if name in BUILTIN:
        return None
    ep = _installed(name)
    if ep is None:
        raise ConfigError(
            f"{where} {name!r} is neither built in ({', '.join(BUILTIN)}) nor an "
            f"installed entry point in the group {ENTRY_POINT_GROUP!r}",
            hint="check the spelling, or install the package that provides it (pip install ...)")
    return ep


def load_workload(cfg: WorkloadConfig) -> Workload:
    ep = check_workload_name(cfg.name)
    if ep is None:
        module_name, _, attr = BUILTIN[cfg.name].partition(":")
        obj = getattr(importlib.import_module(module_name), attr)
    else:
        try:
            obj = ep.load()
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"ledger/woolf.toml: cannot load workload {cfg.name!r}: {exc}") from None
    _check_params(cfg.params)
    _check_param_types(obj, cfg.params, cfg.name)
    try:
        return obj(**cfg.params)
    except TypeError as exc:
        raise ConfigError(f"ledger/woolf.toml: workload.params do not fit {cfg.name}: {exc}") from None


def _kind(x) -> str:
    return "boolean" if isinstance(x, bool) else "number" if isinstance(x, (int, float)) else \
        "text" if isinstance(x, str) else type(x).__name__


def _check_param_types(obj, params: dict, name: str) -> None:
    """Each param of the kind its constructor's default has: a number for a number (an integer for an
    integer), a boolean for a boolean, text for text. `--set workload.params.lr=abc` was accepted, and the
    demo's workers then died on a TypeError deep in training."""
    try:
        sig = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return  # no signature to read (a C class): the constructor judges
    defaults = {k: p.default for k, p in sig.items() if p.kind != p.VAR_KEYWORD}
    for key, value in params.items():
        if key not in defaults and not any(p.kind == p.VAR_KEYWORD for p in sig.values()):
            raise ConfigError(f"ledger/woolf.toml: workload.params.{key}: {name} takes no such parameter",
                              hint=f"its parameters: {', '.join(sorted(defaults))}")
        default = defaults.get(key, inspect.Parameter.empty)
        if default is inspect.Parameter.empty or default is None:
            continue
        want = _kind(default)
        ok = _kind(value) == want and not (isinstance(default, int) and not isinstance(default, bool)
                                            and isinstance(value, float))
        if want in ("number", "boolean", "text") and not ok:
            what = "an integer" if isinstance(default, int) and want == "number" else f"a {want}"
            raise ConfigError(f"ledger/woolf.toml: workload.params.{key} = {value!r} is not {what}",
                              hint=f"{name}'s {key} takes {what}, e.g. {default!r}")


def _check_params(value, where: str = "workload.params") -> None:
    """Params are data: numbers, strings, booleans, and lists or tables of them."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_params(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_params(v, f"{where}[{i}]")
    elif not isinstance(value, (bool, int, float, str)):
        raise ConfigError(f"ledger/woolf.toml: {where} is a {type(value).__name__}; params are plain data")


def train_summary(steps: int, seconds: float, losses: list[float], tokens: int, data: TrainData, **more) -> dict:
    """The summary every trainer returns beside its weights or factors: the steps, their seconds, the mean
    loss of the last fifth of the steps, the tokens seen, where the data came from, and ``more``."""
    tail = losses[-max(1, steps // 5):]
    return {"steps": steps, "seconds": round(seconds, 3), "train_loss": sum(tail) / len(tail), "tokens": tokens,
            "data": data.source, **more}


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available", hint="use --device auto or cpu")
    return device


def describe_device(device: str) -> str:
    """What a verdict records about where its metrics came from: "cpu" or "cuda:<name>", with torch's version.

    Evaluation on CPU is deterministic (the audit and a quorum rely on it); a GPU's may
    differ from it in the last digits, so verdicts say which produced their metrics.
    """
    name = device
    if device.startswith("cuda") and torch.cuda.is_available():
        name = f"cuda:{torch.cuda.get_device_name(torch.device(device))}"
    return f"{name}; torch {torch.__version__.split('+')[0]}"


def apply_follow(model: torch.nn.Module, follow, follow_every: int, step: int, steps: int) -> None:
    """Every ``follow_every`` steps (not after the last), move the model by what main moved.

    ``follow()`` (woolf/participant/follow.py) returns ``{name: new version - old base}`` or None.
    """
    if follow is None or not follow_every or step % follow_every or step >= steps:
        return
    shift = follow()
    if shift is None:
        return
    with torch.no_grad():
        state = model.state_dict()
        for name, delta in shift.items():
            state[name].add_(delta.to(state[name].dtype).to(state[name].device))


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Activations recomputed in the backward pass (non-reentrant), by the installed transformers' current name:
    the old one, ``gradient_checkpointing_enable``, printed a FutureWarning on every LoRA run. Here, not in
    hf/, because the one LoRA trainer (lora.py) calls it on any workload's model that offers checkpointing."""
    on = getattr(model, "activation_checkpointing_enable", None)
    if on is not None:
        on(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # a transformers 5 that predates the new name
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
