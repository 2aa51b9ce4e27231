"""Deferred Ctrl-C (woolf/interrupts.py): the first one is answered at once, a second one aborts."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
