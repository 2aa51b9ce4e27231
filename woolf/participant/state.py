"""A participant's local areas (work, private state) and its measured speed for `--steps auto`.

Usage:
    work_dir(ledger), state_dir(ledger)                 # .woolf/work (trained weights), .woolf/state
    steps = auto_steps(ledger, fingerprint, state)     # about workload.auto_seconds of training here
    record_speed(fingerprint, summary, state)          # after training: steps per second, per workload

The record (state/speed.json) is local and private, like the optimizer state:
never uploaded. A record for another workload, or an unreadable one, falls back
to the ledger's default steps (and that run measures the speed).
"""

from __future__ import annotations

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
