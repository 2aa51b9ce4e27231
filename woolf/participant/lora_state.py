"""A participant's LoRA adapters carried from one contribution to the next, in its private state area.

Usage (participant/lora.py's train_lora calls these when the spec carries, ``carry=1``):
    state, record = load_adapters(ledger, wl, spec)   # AdapterState (empty: fresh) and the recipe's record of it
    ... wl.train_lora(..., state=state) ...
    keep_adapters(ledger, wl, spec, state)            # .woolf/state/lora-adapters.safetensors for the next one

The file (safetensors, never pickle) holds what workloads/lora.py's ``AdapterState`` holds: per target
tensor T, ``T.lora_A`` and ``T.lora_B`` (peft's orientation) with their AdamW moments
``exp_avg/T.lora_A``, ``exp_avg_sq/T.lora_A`` (and B's), and the optimizer's ``step``; its metadata names
the ledger (its genesis commit), the workload's fingerprint, the rank and the spec. It never leaves the
participant's clone. Before training it is copied to .woolf/work/start-lora-adapters.safetensors (the
state this result started from, kept until the next `train`), and the recipe records it as the
optimizer's start: ``{"start": "carried", "kind": "lora-adapters", "sha256", "md5", "size"}`` of that
file, so a re-training can ask for exactly those bytes. A state from another ledger, another workload
or another rank, or a file that cannot be read, is refused with one line and nothing changes
(`woolf train --fresh` discards it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from woolf.errors import UsageError
from woolf.participant.state import state_dir, work_dir
from woolf.storage.files import hashes_of_file
from woolf.storage.weights import save_atomic

ADAPTERS = "lora-adapters.safetensors"  # in .woolf/state: carried to the next contribution
START = "start-lora-adapters.safetensors"  # in .woolf/work: what the last `train` started from
HINT = "`woolf train --fresh` discards it and starts fresh adapters"
KIND = "lora-adapters"


def _identity(ledger, wl, spec) -> dict[str, str]:
    fingerprint = wl.fingerprint() if hasattr(wl, "fingerprint") else ledger.config.workload.name
    return {"ledger": ledger.show(0).commit, "fingerprint": fingerprint, "r": str(spec.r)}


def _read(path: Path) -> tuple[dict, dict]:
    import torch  # deferred: torch
    from safetensors import safe_open  # deferred: safetensors

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open has no iterator)
    except Exception as exc:  # the participant's own file, but torn or foreign: never trusted
        raise UsageError(f"{path} cannot be read as carried LoRA adapters: {str(exc)[:80]}", hint=HINT) from None
    if not all(t.dtype == torch.float32 and bool(torch.isfinite(t).all()) for t in tensors.values()) \
            or "step" not in tensors:
        raise UsageError(f"{path}: the carried LoRA adapters are not finite float32 tensors with a step", hint=HINT)
    return meta, tensors


def load_adapters(ledger, wl, spec):
    """(AdapterState, the recipe's optimizer record): the carried state, or an empty one (fresh) and None."""
    from woolf.workloads.lora import AdapterState  # deferred: peft

    start = work_dir(ledger) / START
    start.unlink(missing_ok=True)
    path = state_dir(ledger) / ADAPTERS
    if not path.exists():
        return AdapterState(), None
    meta, tensors = _read(path)
    want = _identity(ledger, wl, spec)
    if meta.get("ledger") != want["ledger"]:
        raise UsageError(f"the carried LoRA adapters in {path} are another ledger's (genesis "
                         f"{str(meta.get('ledger'))[:12]}; this one's is {want['ledger'][:12]})", hint=HINT)
    if meta.get("fingerprint") != want["fingerprint"]:
        raise UsageError(f"the carried LoRA adapters in {path} are for {str(meta.get('fingerprint'))[:80]!r}, "
                         f"this workload is {want['fingerprint']!r}", hint=HINT)
    if meta.get("r") != want["r"]:
        raise UsageError(f"--lora {spec.text()}: the carried LoRA adapters in {path} are rank "
                         f"{str(meta.get('r'))[:8]}", hint=f"{HINT}, or train at their rank")
    start.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, start)
    md5, sha = hashes_of_file(start)
    return AdapterState(tensors), {"start": "carried", "kind": KIND, "sha256": sha, "md5": md5,
                                   "size": start.stat().st_size}


def keep_adapters(ledger, wl, spec, state) -> None:
    """The state at the end of training, for the next contribution (written from the tensors' memory)."""
    meta = {**_identity(ledger, wl, spec), "lora": spec.text()}
    save_atomic(state.tensors, state_dir(ledger) / ADAPTERS, metadata=meta, hashed=True)
