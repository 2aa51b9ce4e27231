"""The zygote process of woolf/demo/zygote.py: imports what a demo worker needs once, then forks one
worker per request on stdin and reports pids and exits on its own descriptor (the protocol is in
zygote.py's docstring).

Usage (what Zygote starts; nothing else runs it):
    python -P -m woolf.demo.zygote_process        # stdin: {"args": [...], "log": PATH} lines
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import sys
import time
import traceback
from pathlib import Path

from woolf.demo.zygote import GRACE, signal_group


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
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit((code & 0xFF) if isinstance(code, int) else (0 if code is None else 1))  # as sys.exit does


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
