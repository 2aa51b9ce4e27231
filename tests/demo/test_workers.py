"""The demo's worker processes: forked from one zygote, never shadowed by a `woolf/` folder in the cwd;
a dead one fails the demo; the zygote stops the workers it leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import woolf
from woolf.demo import zygote as zyg
from woolf.demo.workers import WorkerDied, check_alive, stop
from woolf.demo.zygote import Zygote
from woolf.errors import WoolfError


def _shadow(where):
    """What `git clone ... woolf` leaves in the cwd: a folder named woolf without the package's modules."""
    for sub in ("woolf", "woolf/ledger"):
        (where / sub).mkdir(parents=True)
        (where / sub / "__init__.py").write_text("")


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "own-process"])  # own process: off Linux
def test_a_worker_that_died_is_an_error_naming_it_and_quoting_its_log(tmp_path, fork):
    logs = tmp_path / "logs"
    with Zygote(logs, fork=fork) as z:
        p = z.spawn(["participant", str(tmp_path / "no-such-clone"), "--name", "p1", "--rounds", "1"], logs / "p1.log")
        ok = z.spawn(["--help"], logs / "v1.log")
        assert p.wait(60) == 1 and ok.wait(60) == 0
        with pytest.raises(WorkerDied, match=r"worker p1 died \(exit status 1\): error: .*no-such-clone") as e:
            check_alive({"v1": ok, "p1": p}, logs)
        assert str(logs / "p1.log") in e.value.hint
        check_alive({"v1": ok}, logs)  # exit 0: alive enough
        assert "usage: woolf.demo.worker" in (logs / "v1.log").read_text()


def _gone(pid: int) -> bool:
    """No such process, or a zombie (ended, not yet reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _validator(z, network, name, tmp_path):
    """A worker that runs until stopped: a validator polling a real clone (its stop file never appears)."""
    network.clone(name)
    return z.spawn(["validator", str(network.root / name), "--name", name, "--stop-file", str(tmp_path / "never"),
                    "--interval", "0.2"], tmp_path / "logs" / f"{name}.log")


def test_workers_are_forked_from_the_zygote_each_in_its_own_session_and_stopped_with_it(network, tmp_path):
    with Zygote(tmp_path / "logs") as z:
        a, b = _validator(z, network, "v1", tmp_path), _validator(z, network, "v2", tmp_path)
        for w in (a, b):  # the zygote's children, each the leader of its own session (the demo's Ctrl-C is the demo's)
            assert os.getsid(w.pid) == w.pid and psutil.Process(w.pid).ppid() == z.proc.pid
        assert a.poll() is None and b.poll() is None
        stop([a])  # SIGTERM to its group: exit status as Popen says it
        assert a.returncode == -signal.SIGTERM and b.poll() is None
    # closing the zygote stopped b, and its exit was read
    assert b.returncode == -signal.SIGTERM and _gone(b.pid) and z.proc.returncode == 0


def test_signals_to_the_demos_group_leave_the_zygote_to_the_demo(network, tmp_path):
    """Ctrl-C, `timeout woolf demo` and a closed terminal signal the demo's whole process group, the zygote
    with it: it stays (to report the workers' exits while the demo stops them) and ends when the demo
    closes it."""
    with Zygote(tmp_path / "logs") as z:
        a = _validator(z, network, "v1", tmp_path)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(z.proc.pid, sig)
        time.sleep(0.5)
        assert z.proc.poll() is None and a.poll() is None
        assert z.spawn(["--help"], tmp_path / "logs" / "help.log").wait(60) == 0  # it still serves
        stop([a])
        assert a.returncode == -signal.SIGTERM
    assert z.proc.returncode == 0


def test_a_worker_that_has_ended_is_stopped_without_error(tmp_path):
    """The zygote reaps a worker at once: its group is gone before the demo reads the exit; stop() and
    the signal it sends take that as ended, not as an error (ESRCH)."""
    p = subprocess.Popen(["true"])
    p.wait()
    zyg.signal_group(p.pid, signal.SIGTERM)  # no such group: no error
    with Zygote(tmp_path / "logs") as z:
        w = z.spawn(["--help"], tmp_path / "logs" / "help.log")
        deadline = time.time() + 60
        while not _gone(w.pid) and time.time() < deadline:
            time.sleep(0.05)
        stop([w])  # ended, its exit maybe unread: no ProcessLookupError
        assert w.returncode == 0


def test_a_dead_zygote_is_an_error_and_its_workers_are_killed(network, tmp_path):
    z = Zygote(tmp_path / "logs")
    w = _validator(z, network, "v1", tmp_path)
    assert w.poll() is None  # running when its starter dies
    # the worker starter dies (its workers would run on, unwaited); not z.proc.kill(): under tests/reaper.py
    # that kills the processes below it first, and the zygote may report the worker's end before it dies
    os.kill(z.proc.pid, signal.SIGKILL)
    with pytest.raises(WoolfError, match="the demo's worker starter exited") as e:
        w.wait(60)
    assert str(tmp_path / "logs" / "zygote.log") in e.value.hint
    assert w.returncode == 255
    deadline = time.time() + 30
    while not _gone(w.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert _gone(w.pid)


def test_a_relative_log_path_is_the_callers(network, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Zygote(tmp_path / "logs") as z:
        assert z.spawn(["--help"], Path("mine") / "help.log").wait(60) == 0
    assert "usage: woolf.demo.worker" in (tmp_path / "mine" / "help.log").read_text()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the 3.10 line names woolf.demo.worker itself")
def test_workers_keep_pythonpath_and_ignore_the_cwd(tmp_path, monkeypatch):
    _shadow(tmp_path)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "probe_mod.py").write_text("import woolf.ledger.ledger, woolf; print(woolf.__file__)\n")
    monkeypatch.setenv("PYTHONPATH", str(extra))
    cmd = [c if c != zyg.MODULE else "probe_mod" for c in zyg.command()]
    out = subprocess.run(cmd, env=zyg.worker_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr  # probe_mod found: PYTHONPATH is honoured
    assert out.stdout.strip() == str(Path(woolf.__file__).resolve())  # this process's woolf, not the cwd's
