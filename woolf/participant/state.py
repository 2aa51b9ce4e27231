"""A participant's local areas (work, private state) and its measured speed for `--steps auto`.

Usage:
    work_dir(ledger), state_dir(ledger)                 # .woolf/work (trained weights), .woolf/state
    steps = auto_steps(ledger, fingerprint, state)     # about workload.auto_seconds of training here
    record_speed(fingerprint, summary, state)          # after training: steps per second, per workload
    waiting_result(ledger)      # {"base_version", "submitted": PR id or None}: what `train` left
    mark_submitted(ledger, id)  # after `submit` sent it: a second `submit` of it is refused

The record (state/speed.json) is local and private, like the optimizer state:
never uploaded. A record for another workload, or an unreadable one, falls back
to the ledger's default steps (and that run measures the speed).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from woolf.protocol import layout
from woolf.storage.files import write_bytes_atomic


def auto_steps(ledger, wl_fingerprint: str, state: Path) -> int:
    """Steps that take about workload.auto_seconds at this participant's measured speed."""
    cfg = ledger.config.workload
    speed_file = state / "speed.json"
    try:
        speed = json.loads(speed_file.read_text())
        if speed.get("workload") != wl_fingerprint:
            raise ValueError("another workload")
        rate = float(speed["steps_per_second"])
        if not 0 < rate < 1e9:
            raise ValueError("bad rate")
    except (OSError, ValueError, KeyError, TypeError):
        return cfg.steps  # not measured yet: the ledger's default, measured this time
    return max(1, min(cfg.max_steps, round(rate * cfg.auto_seconds)))


def record_speed(fingerprint: str, summary: dict, state: Path) -> None:
    secs, steps = summary.get("seconds") or 0, summary.get("steps") or 0
    if secs > 0 and steps > 0:
        state.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(json.dumps({"workload": fingerprint, "steps_per_second": steps / secs}).encode(),
                           state / "speed.json")


def work_dir(ledger) -> Path:
    """Where `woolf train` leaves trained weights for `woolf submit`."""
    return ledger.root / layout.WORK / "work"


def state_dir(ledger) -> Path:
    """The participant's private state (optimizer moments, speed): local, never uploaded."""
    return ledger.root / layout.WORK / "state"


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def mark_submitted(ledger, sub_id: str) -> None:
    """After `submit` sent the work area's result: remember that it did, and as which PR."""
    trained = _digest(work_dir(ledger) / "trained.json")
    if trained is not None:
        write_bytes_atomic(json.dumps({"id": sub_id, "trained": trained}).encode(),
                           work_dir(ledger) / "submitted.json")


def waiting_result(ledger) -> dict | None:
    """The result `train` left in the work area: {"base_version", "submitted": PR id or None}, or None.

    A result is submitted when submitted.json names the digest of this very trained.json (a later
    `train` writes a new one, so its result is waiting again)."""
    meta = work_dir(ledger) / "trained.json"
    try:
        record = json.loads(meta.read_text())
        base = record["base_version"] if isinstance(record, dict) else None
    except (OSError, ValueError, KeyError):
        return None
    try:
        mark = json.loads((work_dir(ledger) / "submitted.json").read_text())
        done = mark["id"] if isinstance(mark, dict) and mark.get("trained") == _digest(meta) else None
    except (OSError, ValueError, KeyError):
        done = None
    return {"base_version": base, "submitted": done if isinstance(done, str) else None}
