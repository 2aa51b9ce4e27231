"""A pytest plugin: no test leaves a child process behind, whatever way it ends.

Usage (tests/conftest.py):
    from tests.reaper import _no_child_left_behind, pytest_configure, pytest_unconfigure  # in conftest.py
    pytest -p tests.reaper ...   # or as a plugin

Every ``subprocess.Popen`` made while a test runs is remembered; after the test, one still
running (a test that failed or timed out before it waited for its child) is killed with
SIGKILL, and so is every process below it (a `woolf demo`'s workers, a `woolf train`'s git).
``Popen.kill()`` (what ``subprocess.run(timeout=...)`` and a test's ``finally: p.kill()`` call)
kills the processes below the child first, while they can still be found from it.
Before this, a backgrounded suite whose Ctrl-C tests timed out left a 100,000-step
`woolf train` burning CPU for twenty minutes (issue 38).
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from woolf.git import batch

_spawned: list[subprocess.Popen] = []
_original_init = subprocess.Popen.__init__
_original_kill = subprocess.Popen.kill


def _remembering_init(self, *args, **kwargs):
    _original_init(self, *args, **kwargs)
    _spawned.append(self)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, then theirs), read from /proc."""
    try:
        import psutil  # dvc's dependency; /proc below where it is missing
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def _kill_tree(self) -> None:
    if self.poll() is None:
        for pid in _descendants(self.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    _original_kill(self)


def reap(procs: list[subprocess.Popen]) -> list[int]:
    """Kill every process of ``procs`` still running, and all below it; the pids killed."""
    killed = []
    for proc in procs:
        if proc.poll() is not None:
            continue
        for pid in [*_descendants(proc.pid), proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    return killed


def pytest_configure(config):
    subprocess.Popen.__init__ = _remembering_init
    subprocess.Popen.kill = _kill_tree


def pytest_unconfigure(config):
    subprocess.Popen.__init__ = _original_init
    subprocess.Popen.kill = _original_kill
    reap(_spawned)


@pytest.fixture(autouse=True)
def _no_child_left_behind():
    start = len(_spawned)
    yield
    batch.close_all()  # woolf's long-lived object readers (woolf/git/batch.py) end with the test
    mine = _spawned[start:]
    del _spawned[start:]
    reap(mine)
