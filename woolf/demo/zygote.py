"""The demo's worker starter: one process imports what a worker needs (torch, the participant and
validator roles) once and forks each worker from itself, so a worker starts in milliseconds instead of
importing torch again (1.5-2 CPU-seconds each: a demo's eight workers on two cores waited ~8 s for it).

Usage:
    with Zygote(logs) as zygote:                 # python -P -m woolf.demo.zygote_process, in logs/zygote.log
        p = zygote.spawn(["participant", CLONE, "--name", "p1"], logs / "p1.log")
        p.pid, p.poll(), p.wait(timeout), p.returncode      # what woolf/demo/workers.py uses of a Popen
    # leaving the block ends the workers still running (the zygote's stdin closes; so does a demo that dies)

This module is the demo's side; woolf/demo/zygote_process.py is the zygote. One JSON line each way.
The demo writes {"args": [...], "log": PATH}; the zygote forks, and the child
makes its own session (the demo's Ctrl-C is the demo's; workers.stop() signals the worker's group), runs
in the log's directory with stdout and stderr in the log, and calls woolf.demo.worker.main(args). The
zygote answers {"pid": N} once the child has its session, and {"exit": N, "rc": CODE} when it ends
(Popen's convention: -SIGNAL when a signal ended it). It ignores SIGINT and, when its stdin closes,
stops the workers still running (SIGTERM, SIGKILL after 10 s) and exits.

Forking a process that has imported torch is safe on Linux; on macOS a fork without exec may crash in
the frameworks torch loads (why multiprocessing spawns there), so elsewhere each worker is its own
``python -P -m woolf.demo.worker`` process as before (``Zygote(logs, fork=False)``: a subprocess.Popen).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import woolf
from woolf.errors import WoolfError

MODULE = "woolf.demo.zygote_process"  # the zygote itself
WORKER = "woolf.demo.worker"
FORK = sys.platform.startswith("linux")  # where forking a process that imported torch is known to be safe
GRACE = 10.0  # seconds a worker has to end after SIGTERM when the demo is gone


class Worker:
    """One forked worker, seen from the demo: the part of subprocess.Popen the demo uses."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.zygote.collect(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"demo worker {self.pid}", timeout)
            self.zygote.collect(left)
        return self.returncode


class Zygote:
    """The demo's side: starts the zygote (with the workers' environment), asks it for workers, reads
    their exits. Not thread-safe: the demo's main thread alone talks to it."""

    def __init__(self, logs: Path, fork: bool = FORK):
        logs.mkdir(parents=True, exist_ok=True)
        self.log, self.proc = logs / "zygote.log", None
        self.workers: dict[int, Worker] = {}
        self._new: list[Worker] = []
        self._buf = b""
        if not fork:
            return
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(command(MODULE), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         env=worker_env(), cwd=logs)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def spawn(self, args: list[str], log: Path) -> Worker | subprocess.Popen:
        """A new worker running ``woolf.demo.worker.main(args)`` with ``log`` as its output."""
        log = Path(log).resolve()  # the zygote's cwd is not ours
        log.parent.mkdir(parents=True, exist_ok=True)
        if self.proc is None:  # no fork here: a process of its own, importing torch itself
            with open(log, "w") as fh:
                return subprocess.Popen([*command(WORKER), *map(str, args)], stdout=fh, stderr=subprocess.STDOUT,
                                        env=worker_env(), cwd=log.parent, start_new_session=True)
        try:
            self.proc.stdin.write(json.dumps({"args": [str(a) for a in args], "log": str(log)}).encode() + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # the zygote is gone (a closed pipe)
            self._gone()
        while not self._new:
            self.collect(None)
        return self._new.pop(0)

    def collect(self, timeout: float | None) -> None:
        """Read what the zygote has answered (new workers, exits), waiting up to ``timeout`` seconds; the
        zygote's end (EOF) while the demo still needs it is an error (_gone)."""
        if not self._read(timeout):
            self._gone()

    def _read(self, timeout: float | None) -> bool:
        """One read of the zygote's replies, each applied; False at EOF (the zygote has exited)."""
        if self.proc.stdout is None:
            return False
        if not self._sel.select(timeout):
            return True
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            reply = json.loads(line)
            if "pid" in reply:
                worker = self.workers[reply["pid"]] = Worker(self, reply["pid"])
                self._new.append(worker)
            elif reply.get("exit") in self.workers:
                self.workers[reply["exit"]].returncode = reply["rc"]
        return bool(chunk)

    def _gone(self):
        """The zygote died: its workers cannot be waited for; they are killed and reported as exit 255."""
        for worker in self.workers.values():
            if worker.returncode is None:
                signal_group(worker.pid, signal.SIGKILL)
                worker.returncode = 255
        self._finish()
        raise WoolfError(f"the demo's worker starter exited ({self.proc.returncode}): "
                         f"{last_error(self.log)}", hint=f"its log: {self.log}")

    def close(self) -> None:
        """Close the zygote's stdin: it stops the workers still running (each exit is read as it is
        reported) and exits; wait for that. A worker it did not see end is reported killed (-SIGKILL)."""
        if self.proc is None or self.proc.stdout is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:  # the zygote is gone already
            pass
        deadline = time.monotonic() + GRACE + 5
        while time.monotonic() < deadline and self._read(deadline - time.monotonic()):
            pass  # until EOF: the zygote has reported what it saw and exited
        self._finish()

    def _finish(self) -> None:
        if self.proc.stdout is None:
            return
        self._sel.close()
        self.proc.stdout.close()
        self.proc.stdout = None
        for worker in self.workers.values():
            if worker.returncode is None:
                worker.returncode = -signal.SIGKILL
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def command(module: str = MODULE) -> list[str]:
    """The interpreter line that runs ``module`` (the zygote, or one worker), never importing from the cwd."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    code = f"import sys; del sys.path[0]; from {module} import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code]


def worker_env() -> dict[str, str]:
    """The zygote's (so the workers') environment: one thread each, unbuffered output, and the directory this
    process imported woolf from first on PYTHONPATH (the caller's PYTHONPATH after it)."""
    package_home = str(Path(woolf.__file__).resolve().parent.parent)
    path = [package_home, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}


def signal_group(pid: int, sig: int) -> None:
    """Signal a worker's process group; one that has ended is not an error (the zygote reaps a worker at
    once: its group is gone before the demo reads the exit)."""
    try:
        os.killpg(pid, sig)
    except OSError:  # ESRCH: ended; EPERM: not ours any more
        pass


def last_error(log: Path) -> str:
    """The line of a worker's log that says why it died: the exception line of a traceback, an
    ``error:`` line, or else the last non-empty line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if line.startswith("error:") or (not line.startswith(("File ", "Traceback", "{", "^", "~"))
                                         and ("Error" in line.split(":")[0] or "Exception" in line.split(":")[0])):
            return line
    return lines[-1] if lines else "(empty log)"
