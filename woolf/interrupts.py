"""Make Ctrl-C and SIGTERM raise KeyboardInterrupt in long-running commands.

Usage:
    with interruptible():
        run_forever()            # KeyboardInterrupt on SIGINT or SIGTERM

A shell that starts a background job sets SIGINT to "ignore" for it, and Python
then installs no KeyboardInterrupt; long-running commands restore it explicitly.
"""

from __future__ import annotations

import contextlib
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
