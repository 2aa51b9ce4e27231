"""When a `python -m woolf ...` that a test started can take a Ctrl-C.

Usage (in a test):
    p = subprocess.Popen([sys.executable, "-m", "woolf", "train", ...])
    wait_until_deferred(p)          # woolf's own handling is in place (woolf/interrupts.py)
    p.send_signal(signal.SIGINT)    # lands in woolf, not in the interpreter's start-up

A woolf command installs its Ctrl-C deferral as its first act (woolf/cli/launch.py). Before that the
interpreter is still starting: a SIGINT there is Python's own (a traceback; ignored in a background
job), and no program can catch it. How long the start takes depends on the machine's load, so a test
that sleeps a fixed time before its Ctrl-C passes on an idle machine and fails on a busy one; it waits
for the deferral instead, read from the process's caught-signal mask (Linux /proc): woolf catches
SIGTERM only once it defers, Python alone leaves it at the default.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def _catches_sigterm(pid: int) -> bool | None:
    """Whether ``pid`` has a handler for SIGTERM; None when /proc cannot say (no such process, no /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return None


def wait_until_deferred(proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Return once ``proc`` defers Ctrl-C (or has ended: the test's assertions say how)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        caught = _catches_sigterm(proc.pid)
        if caught is None and proc.poll() is None and not Path("/proc/self/status").exists():
            time.sleep(3.0)  # no /proc to ask (not Linux): the start-up this tree measured, with margin
            return
        if caught:
            return
        time.sleep(0.02)
    if proc.poll() is None:
        raise AssertionError(f"the woolf process {proc.pid} did not defer Ctrl-C within {timeout:g} s")
