"""Deferred Ctrl-C (woolf/interrupts.py): the first one is answered at once, a second one aborts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.processes import wait_until_deferred

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.unit
def test_the_first_deferred_ctrl_c_is_announced_and_the_second_aborts():
    code = textwrap.dedent("""
        import os, signal
        from woolf import interrupts
        interrupts.defer()
        interrupts.announce(lambda: print("stopping after this step", flush=True))
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupts.pending()  # still deferred: the step goes on
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**7):
                pass
            print("not aborted")
        except KeyboardInterrupt:
            print("aborted")
        interrupts.announce(None)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.split() == ["stopping", "after", "this", "step", "aborted"], r


def test_ctrl_c_during_train_says_at_once_that_it_stops_after_the_step(network):
    alice = network.clone("alice")
    p = subprocess.Popen([sys.executable, "-m", "woolf", "train", "--offline", "--steps", "100000"],
                         cwd=alice.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "training step" not in line and p.poll() is None:  # off a terminal, a line for the first step
            line = p.stderr.readline()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130 and "stopping after this step (Ctrl-C again to abort)" in err, err
    assert "interrupted at step" in err and "Traceback" not in err


# A backgrounded test run (SIGINT ignored by the shell) passes and leaves nothing behind: a shell starts a
# background job with SIGINT ignored, so long commands restore SIGINT; every test's children are killed after
# it (tests/reaper.py).


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `cmd &` in a non-interactive shell does


@pytest.mark.unit
def test_deferral_records_a_ctrl_c_the_shell_ignored_and_a_short_command_ignores_it_again():
    code = textwrap.dedent("""
        import os, signal
        from woolf import interrupts
        interrupts.defer()
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupts.pending()
        interrupts.release()  # a short command: ignored again, the Ctrl-C dropped
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and not interrupts.pending()
        interrupts.defer()
        os.kill(os.getpid(), signal.SIGINT)
        try:
            interrupts.release(restore=True)  # a long command: SIGINT stops it
        except KeyboardInterrupt:
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            print("stopped")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       preexec_fn=_ignore_sigint, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "stopped", r.stderr


def test_ctrl_c_stops_a_train_started_as_a_background_job(network):
    alice = network.clone("alice")
    p = subprocess.Popen([sys.executable, "-m", "woolf", "train", "--offline", "--steps", "100000"],
                         cwd=alice.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_ignore_sigint)
    wait_until_deferred(p)  # before it, the interpreter ignores SIGINT as the shell asked: no program sees it
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130 and "Traceback" not in err, err
    assert "interrupted" in err


def test_a_test_that_forgets_its_child_leaves_no_process_behind(tmp_path):
    """tests/reaper.py: a failing test's child and grandchild are killed after it."""
    pids = tmp_path / "pids"
    (tmp_path / "test_forgets.py").write_text(textwrap.dedent(f"""
        import subprocess

        def test_forgets():
            p = subprocess.Popen(["sh", "-c", "sleep 300 & echo $! > {pids}.grand; exec sleep 300"])
            open("{pids}", "w").write(str(p.pid))
            import os, time
            while not os.path.exists("{pids}.grand"):
                time.sleep(0.05)
            assert False, "fails without waiting for its child"
    """))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "tests.reaper",
                        str(tmp_path / "test_forgets.py")], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "1 failed" in r.stdout, r.stdout + r.stderr
    for path in (pids, Path(f"{pids}.grand")):
        pid = int(path.read_text())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        assert not _alive(pid), f"{path.name}: process {pid} is still running"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_killed_on_timeout_takes_its_children_with_it(tmp_path):
    """subprocess.run(timeout=...) kills the child only; tests/reaper.py's Popen.kill its children first."""
    grand = tmp_path / "grand"
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(["sh", "-c", f"sleep 300 & echo $! > {grand}; wait"], timeout=3)
    pid = int(grand.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), f"process {pid} outlived its parent's timeout"
