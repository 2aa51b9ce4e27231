"""Make Ctrl-C and SIGTERM raise KeyboardInterrupt in long-running commands.

Usage:
    with interruptible():
        run_forever()            # KeyboardInterrupt on SIGINT or SIGTERM

    defer()                      # at process start: Ctrl-C only sets a flag ...
    check()                      # ... raised as KeyboardInterrupt here, at a safe point
    release()                    # back to Python's default (raises if one is pending)
    announce(say)                # while deferred: the first Ctrl-C calls say() at once, a second aborts

Deferral exists because a KeyboardInterrupt raised inside torch's own lazy imports
is swallowed by torch, or leaves numpy half-imported (a RecursionError later):
`woolf train` keeps Ctrl-C deferred and checks at every training step.

A shell that starts a background job sets SIGINT to "ignore" for it, and Python
then installs no KeyboardInterrupt; long-running commands restore it explicitly:
`defer()` records SIGINT even where it was ignored, `release(restore=True)` (train,
validate) and `interruptible()` (validate --watch, demo) raise on it; a short command's
`release()` puts "ignore" back, dropping a Ctrl-C that came while it started (so that
`woolf train` in a backgrounded test run could not be stopped with SIGINT).

A deferred Ctrl-C waits for the next safe point, which on a real model is the end of a step (a minute
on a CPU): `announce` makes the first Ctrl-C say so at once ("stopping after this step, Ctrl-C again to
abort"), the second raise KeyboardInterrupt where it lands, and a third end the process (130) in case
the second landed where it is swallowed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_pending: list[int] = []
_ignored: list[bool] = []  # whether SIGINT was ignored when this process first deferred it


_notice: list = []  # announce(): what the first deferred Ctrl-C calls


def _record(signum, frame):
    _pending.append(signum)
    if not _notice or signum != signal.SIGINT:
        return
    count = _pending.count(signal.SIGINT)
    if count == 1:
        _notice[0]()
    elif count == 2:
        raise KeyboardInterrupt
    else:
        os.write(2, b"aborted\n")
        os._exit(130)


def announce(say) -> None:
    """While Ctrl-C is deferred: the first one calls ``say()`` (what happens now), the second raises
    KeyboardInterrupt at once, a third ends the process. ``announce(None)``: back to silent deferral."""
    _notice[:] = [say] if say is not None else []


def defer() -> None:
    """SIGINT (ignored or not: a background job's) and SIGTERM set a flag instead of raising."""
    if threading.current_thread() is not threading.main_thread():
        return
    if not _ignored:
        _ignored.append(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    signal.signal(signal.SIGINT, _record)
    signal.signal(signal.SIGTERM, _record)


def pending() -> bool:
    return bool(_pending)


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C (or SIGTERM) arrived while deferred."""
    if _pending:
        _pending.clear()
        raise KeyboardInterrupt


def release(restore: bool = False) -> None:
    """Python's default handling again: Ctrl-C raises wherever it lands; a pending one raises now.
    Where SIGINT was ignored (a background job) it is ignored again, unless ``restore`` (a
    long-running command, which SIGINT must be able to stop)."""
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is _record:
            if _ignored and _ignored[0] and not restore:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _pending[:] = [s for s in _pending if s != signal.SIGINT]
            else:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) is _record:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    check()
