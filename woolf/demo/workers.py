"""The demo's worker processes, waited for, stopped and checked: a worker that died is an error that
names it and quotes its log.

Usage:
    with Zygote(root / "logs") as zygote:      # woolf/demo/zygote.py: workers forked, torch imported once
        p = zygote.spawn(["participant", str(clone), "--name", "p1"], root / "logs" / "p1.log")
        check_alive({"p1": p}, root / "logs")  # raises WorkerDied for a worker that exited non-zero
        wait_for([p], show=lambda: None)       # until it ends (show: a live view, once a second)
        stop([p])

The zygote is ``python -P -m woolf.demo.zygote_process`` (Python 3.11+; on 3.10 the same with the cwd dropped
from sys.path by hand) with the directory this process imported woolf from first on PYTHONPATH, the
caller's PYTHONPATH after it, and the demo's logs directory as its cwd: a folder named ``woolf`` in the
directory the demo was started from (which `git clone ... woolf` creates) is never imported.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from woolf.demo.zygote import Worker, last_error, signal_group
from woolf.errors import WoolfError


class WorkerDied(WoolfError):
    """A participant or validator process of the demo exited with an error."""

    exit_code = 1


def wait_for(procs: list[Worker | subprocess.Popen], show, check=None, every: float = 1.0) -> None:
    """Until every one of ``procs`` has ended: ``check()`` (a dead worker raises) 4 times a second,
    ``show()`` every ``every`` seconds (the demo's live view fetches: it is not polled as often)."""
    shown = 0.0
    while any(p.poll() is None for p in procs):
        if check is not None:
            check()
        if time.time() - shown >= every:
            show()
            shown = time.time()
        time.sleep(0.25)


def stop(procs: list[Worker | subprocess.Popen], grace: float = 10.0) -> None:
    """SIGTERM to each worker's process group, SIGKILL to one still running after ``grace`` seconds."""
    for p in procs:
        if p.poll() is None:
            signal_group(p.pid, signal.SIGTERM)
    deadline = time.time() + grace
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            signal_group(p.pid, signal.SIGKILL)
            p.wait()


def check_alive(procs: dict[str, Worker | subprocess.Popen], logs: Path) -> None:
    """Raise WorkerDied when any worker has exited with a non-zero status (the others are left to the
    caller to stop)."""
    dead = {name: p.returncode for name, p in procs.items() if p.poll() is not None and p.returncode != 0}
    if not dead:
        return
    name, rc = next(iter(dead.items()))
    others = f" (and {', '.join(sorted(set(dead) - {name}))})" if len(dead) > 1 else ""
    raise WorkerDied(f"demo worker {name}{others} died (exit status {rc}): {last_error(logs / f'{name}.log')}",
                     hint=f"its whole log: {logs / f'{name}.log'}")
