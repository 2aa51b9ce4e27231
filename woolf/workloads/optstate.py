"""A participant's inner optimizer state, kept across contributions in its clone (never uploaded).

Usage:
    how = load_optimizer(opt, model, state_dir, fingerprint)   # "resumed at step N" | "fresh" |
                                                               # "fresh (carried state did not load: why; ...)"
    ... train ...
    save_optimizer(opt, model, state_dir, fingerprint)

DiLoCo keeps each worker's AdamW moments across rounds while its weights are
replaced by the new global version; restarting Adam on every contribution
makes early steps noisy (its bias correction treats every round as step 1).
The file is safetensors (``<key>/<param name>`` per tensor, never pickle) with
the workload's fingerprint in its metadata, written from the tensors' own memory. A file that does not fit the
current model (another workload or size, a corrupted file) is renamed aside, never mixed in, and
never silently: the returned text says "fresh (carried state did not load: why; set aside as ...)".
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from safetensors import safe_open

from woolf.storage.weights import save_atomic

FILE = "optimizer.safetensors"


def _names(model: torch.nn.Module) -> dict[torch.nn.Parameter, str]:
    return {p: n for n, p in model.named_parameters()}


def save_optimizer(opt: torch.optim.Optimizer, model: torch.nn.Module, state_dir: Path,
                   fingerprint: str) -> None:
    tensors = {}
    names = _names(model)
    for p, st in opt.state.items():
        for key, value in st.items():
            if torch.is_tensor(value):
                tensors[f"{key}/{names[p]}"] = value.detach().to("cpu").contiguous()
    meta = {"fingerprint": fingerprint, "optimizer": type(opt).__name__}
    # written tensor by tensor from their own memory (storage/writer.py), never as one bytes object
    save_atomic(tensors, Path(state_dir) / FILE, metadata=meta, hashed=True)


def _set_aside(path: Path, why: str) -> str:
    """The carried state did not load: moved aside, and said (`woolf train` prints the returned text as a
    warning, JSON or not; a re-training refuses to go on: validator/retrain.py); the training starts fresh
    and its recipe says so (participant/recipe.py)."""
    aside = path.with_name(f"{path.name}.set-aside-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9}")
    path.replace(aside)
    return f"fresh (carried state did not load: {why}; set aside as {aside.name})"


def load_optimizer(opt: torch.optim.Optimizer, model: torch.nn.Module, state_dir: Path,
                   fingerprint: str) -> str:
    path = Path(state_dir) / FILE
    if not path.exists():
        return "fresh"
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            if meta.get("fingerprint") != fingerprint or meta.get("optimizer") != type(opt).__name__:
                return _set_aside(path, f"made for {meta.get('fingerprint')!r}/{meta.get('optimizer')!r}, "
                                        f"this is {fingerprint!r}/{type(opt).__name__}")
            stored = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open has no iterator)
    except Exception as exc:  # any unreadable file is set aside, never trusted
        return _set_aside(path, f"unreadable: {str(exc)[:80]}")
    params = dict(model.named_parameters())
    state: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in stored.items():
        kind, _, name = key.partition("/")
        state.setdefault(name, {})[kind] = value
    if set(state) != set(params):
        return _set_aside(path, "its parameters are not this model's")
    for name, st in state.items():
        p = params[name]
        for kind, value in st.items():
            if kind != "step" and (value.shape != p.shape or value.dtype != p.dtype):
                return _set_aside(path, f"{kind} of {name} does not fit the model")
            if not bool(torch.isfinite(value).all()):
                return _set_aside(path, f"{kind} of {name} is not finite")
    for name, st in state.items():
        p = params[name]
        opt.state[p] = {k: (v if k == "step" else v.to(p.device)) for k, v in st.items()}
    step = next(iter(state.values())).get("step")
    return f"resumed at step {int(step) if step is not None else 0}"
