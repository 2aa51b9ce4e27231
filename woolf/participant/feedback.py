"""Error feedback for a participant: what the ledger did not merge of a delta goes into the next one.

Usage:
    remember(ledger, sub_id, pointer)        # after a submission: its fate is looked up later
    residual = settle(ledger, spec)          # {name: tensor} or None: the unmerged parts so far
    clear_residual(ledger, sub_id)           # once a new delta (sub_id) carries it

A rejected PR's whole delta, and the part an `attenuated` merge scaled away
(``1 - float32(alpha * attenuation)``), are carried into the participant's next
delta (SparseLoCo's error feedback, here for rejected and stale work). Work is
carried at most once: a PR that carried a residual and is rejected in turn
passes on only its own part (carried residuals that compound make every later
delta larger and likelier to be refused: benchmarks/RESULTS.md §3). Merges
under a stateful rule count as fully applied. PRs still open are looked at
again next time. Everything lives in ``.woolf/state/feedback`` and is never
uploaded except as part of a later delta. A residual that does not fit the
model is set aside with a warning.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from woolf.core.scale import delta_scale
from woolf.errors import WoolfError
from woolf.protocol import layout
from woolf.storage import kinds
from woolf.storage.files import write_bytes_atomic
from woolf.storage.pointer import Pointer


def _dir(ledger) -> Path:
    return ledger.root / layout.WORK / "state" / "feedback"


def _pending(ledger) -> list[dict]:
    try:
        data = json.loads((_dir(ledger) / "pending.json").read_text())
        return [p for p in data if isinstance(p, dict) and {"id", "md5", "size"} <= set(p)]
    except (OSError, ValueError, TypeError):
        return []


def _write_pending(ledger, items: list[dict]) -> None:
    _dir(ledger).mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(json.dumps(items).encode(), _dir(ledger) / "pending.json")


def remember(ledger, sub_id: str, pointer: Pointer, declared: dict | None = None) -> None:
    """``declared``: submission.json's delta (its kind and parameters), to expand a compressed one later."""
    kind = {k: v for k, v in (declared or {}).items() if k in ("kind", "chunk", "k", "bits")}
    _write_pending(ledger, [*_pending(ledger), {"id": sub_id, "md5": pointer.md5, "size": pointer.size,
                                                "delta": kind or {"kind": "dense"}}])


def _unmerged_fraction(ledger, pr) -> float | None:
    """1 for a rejected or withdrawn PR, what an attenuated merge left out, None while open."""
    if pr.state == "open":
        return None
    if pr.state != "merged":
        return 1.0
    try:
        version = ledger.show(pr.version, ref="refs/remotes/origin/main")
    except WoolfError:
        return 0.0
    if (version.rule or "attenuated") != "attenuated" or version.alpha is None or version.attenuation is None:
        return 0.0
    return max(0.0, 1.0 - delta_scale(version.alpha, version.attenuation))


def settle(ledger, forge, spec: dict) -> tuple[dict | None, str]:
    """The accumulated residual (None if nothing), and what happened, in words (torch tensors)."""
    import torch  # deferred: torch
    from safetensors.torch import load_file, save_file  # deferred: safetensors

    from woolf.storage.weights import spec_of  # deferred: loads numpy

    residual_path = _dir(ledger) / "residual.safetensors"
    residual = None
    if residual_path.exists():
        try:
            residual = load_file(str(residual_path))
            if spec_of(residual) != {k: ("F32", s) for k, (_, s) in spec.items()}:
                raise ValueError("another model")
        except Exception as exc:  # a residual that does not fit is never mixed in
            aside = residual_path.with_name(f"residual.set-aside-{time.time_ns()}.safetensors")
            residual_path.replace(aside)
            residual = None
            note = f"residual set aside ({str(exc)[:60]}): {aside.name}"
            return None, note
    still_open, notes = [], []
    for item in _pending(ledger):
        try:
            pr = forge.refresh(item["id"])  # submit fetched the PR refs already
            fraction = _unmerged_fraction(ledger, pr)
            if fraction is None:
                still_open.append(item)
                continue
            if fraction == 0.0:
                continue
            delta = kinds.load_delta(ledger.store.fetch_object(Pointer(item["md5"], item["size"], "delta")),
                               item.get("delta") or {"kind": "dense"}, spec, ledger.config.limits)
        except WoolfError:
            still_open.append(item)  # unreachable for now: look again next time
            continue
        carried = _dir(ledger) / f"carried-{item['id']}.safetensors"
        if carried.exists():  # work is carried at most once: take out what this PR itself carried
            earlier = load_file(str(carried))
            delta = {k: v.to(torch.float32) - earlier[k] for k, v in delta.items()}
            carried.unlink()
        part = {k: v.to(torch.float32) * fraction for k, v in delta.items()}
        residual = part if residual is None else {k: residual[k] + part[k] for k in residual}
        notes.append(f"{fraction:.0%} of {item['id']} ({pr.state})")
    _write_pending(ledger, still_open)
    if residual is not None:
        _dir(ledger).mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in residual.items()}, str(residual_path))
    return residual, ("carried " + ", ".join(notes)) if notes else ""


def clear_residual(ledger, sub_id: str) -> None:
    """The residual now rides in ``sub_id``'s delta: kept aside so that it is never carried twice."""
    path = _dir(ledger) / "residual.safetensors"
    if path.exists():
        path.replace(_dir(ledger) / f"carried-{sub_id}.safetensors")
