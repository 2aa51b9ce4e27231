"""The demo's worker starter: one process imports what a worker needs (torch, the participant and
validator roles) once and forks each worker from itself, so a worker starts in milliseconds instead of
importing torch again (1.5-2 CPU-seconds each: a demo's eight workers on two cores waited ~8 s for it).

Usage:
    with Zygote(logs) as zygote:                 # python -P -m woolf.demo.zygote, in logs/zygote.log
        p = zygote.spawn(["participant", CLONE, "--name", "p1"], logs / "p1.log")
        p.pid, p.poll(), p.wait(timeout), p.returncode      # what woolf/demo/workers.py uses of a Popen
    # leaving the block ends the workers still running (the zygote's stdin closes; so does a demo that dies)

One JSON line each way. The demo writes {"args": [...], "log": PATH}; the zygote forks, and the child
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
import random
import selectors
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import woolf
from woolf.errors import WoolfError

MODULE = "woolf.demo.zygote"
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
        """Read what the zygote has answered (new workers, exits), waiting up to ``timeout`` seconds."""
        if self.proc.stdout is None or not self._sel.select(timeout):
            return
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            self._gone()
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            reply = json.loads(line)
            if "pid" in reply:
                worker = self.workers[reply["pid"]] = Worker(self, reply["pid"])
                self._new.append(worker)
            elif reply.get("exit") in self.workers:
                self.workers[reply["exit"]].returncode = reply["rc"]

    def _gone(self):
        """The zygote died: its workers cannot be waited for; they are killed and reported as exit 255."""
        for worker in self.workers.values():
            if worker.returncode is None:
                signal_group(worker.pid, signal.SIGKILL)
                worker.returncode = 255
        self._finish()
        raise WoolfError(f"the demo's worker starter exited ({self.proc.returncode}): "
                         f"{_last_line(self.log)}", hint=f"its log: {self.log}")

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
        try:
            while time.monotonic() < deadline:
                self.collect(deadline - time.monotonic())
        except WoolfError:  # EOF: the zygote has reported what it saw and exited
            return
        finally:
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
    return [sys.executable, "-c", f"import sys; del sys.path[0]; from {module} import main; sys.exit(main(sys.argv[1:]))"]


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


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    return lines[-1] if lines else "(empty log)"


# ---- the zygote process ----

def _child(request: dict, ready: int, reply_fd: int) -> None:
    """In the forked worker: its own session, the log as stdout and stderr, the worker's main; never returns.

    Like multiprocessing's children it ends with os._exit: atexit handlers registered in the zygote or the
    worker do not run (woolf's one, ending the object readers of woolf/git/batch.py: their git processes
    end on EOF when the worker exits)."""
    code = 1
    try:
        os.setsid()  # first: out of the terminal's foreground group before anything else can happen
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.close(ready)  # the zygote answers the pid once the session exists (stop() signals the group)
        os.close(reply_fd)
        log = Path(request["log"])
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        os.chdir(log.parent)
        random.seed()  # a fork shares the zygote's state; each worker draws its own
        from woolf.demo.worker import main  # deferred: loads torch (imported by the zygote already)

        code = main(request["args"])
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the log says why; the exit status says that it failed
        traceback.print_exc()
    finally:
        try:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            code = (code & 0xFF) if isinstance(code, int) else (0 if code is None else 1)  # as sys.exit does
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code <= 255 else 1)


def _fork(request: dict, keep_out: tuple[int, ...]) -> int:
    """Fork one worker; its pid once it has its own session. ``keep_out``: the zygote's own descriptors."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        for fd in keep_out[:-1]:
            os.close(fd)
        _child(request, ready_w, keep_out[-1])
    os.close(ready_w)
    os.read(ready_r, 1)  # EOF: the child has its session (or died)
    os.close(ready_r)
    return pid


_REPLIES = [1]  # the descriptor the demo reads: fd 1 until main() moves it out of print()'s way


def _reply(**kw) -> None:
    """One line to the demo, unbuffered (a forked child must find no reply of ours in a buffer); once the
    demo is gone there is no one to tell."""
    try:
        os.write(_REPLIES[0], json.dumps(kw).encode() + b"\n")
    except OSError:
        pass


def _reap(running: set[int]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        running.discard(pid)
        _reply(exit=pid, rc=os.waitstatus_to_exitcode(status))


def _stop_all(running: set[int]) -> None:
    """SIGTERM to every worker's group, SIGKILL to what is left after GRACE; each exit is reported."""
    for sig, seconds in ((signal.SIGTERM, GRACE), (signal.SIGKILL, 5.0)):
        for pid in running:
            signal_group(pid, sig)
        deadline = time.monotonic() + seconds
        while running and time.monotonic() < deadline:
            _reap(running)
            time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    """The zygote (it takes no arguments: ``argv`` is for command()'s Python 3.10 line)."""
    # the demo's process group may be signalled (Ctrl-C, `timeout woolf demo`, a closed terminal): the demo
    # stops the workers; the zygote ends when its stdin closes, so that it is there to report their exits
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    _REPLIES[0] = os.dup(1)  # replies on a descriptor of their own; a stray print() goes to the log
    os.dup2(2, 1)
    # what every worker imports, once, here (the demo imports this module for Zygote, without them)
    import torch  # deferred: loads torch

    import woolf.demo.dishonest  # noqa: F401  # deferred: loads torch
    import woolf.demo.worker  # noqa: F401  # deferred: loads torch
    import woolf.participant  # noqa: F401  # deferred: loads torch, numpy
    import woolf.validator  # noqa: F401  # deferred: loads torch, numpy
    import woolf.workloads.charlm  # noqa: F401  # deferred: loads torch

    torch.set_num_threads(1)
    running: set[int] = set()
    try:
        _serve(running)
    finally:  # stdin closed, or the zygote itself failed: no worker outlives it
        _stop_all(running)
    return 0


def _serve(running: set[int]) -> None:
    """Fork a worker for each request on stdin and report each exit, until stdin closes."""
    wakeup = os.pipe()
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(wakeup[0], selectors.EVENT_READ)
    keep_out = (*wakeup, sel.fileno(), _REPLIES[0])
    buf = b""
    while True:
        for key, _ in sel.select():
            if key.fd == wakeup[0]:
                os.read(wakeup[0], 4096)
                _reap(running)
                continue
            chunk = os.read(0, 65536)
            if not chunk:  # the demo closed us, or died
                return
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                pid = _fork(json.loads(line), keep_out)
                running.add(pid)
                _reply(pid=pid)
        _reap(running)


if __name__ == "__main__":
    sys.exit(main())
