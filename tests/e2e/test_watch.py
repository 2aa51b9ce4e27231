"""`woolf validate --watch` says it is waiting, and Ctrl-C ends it (or a one-shot pass) in words, not a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from tests.processes import wait_until_deferred


def _start(cwd, *args):
    p = subprocess.Popen([sys.executable, "-m", "woolf", "validate", *args, "--device", "cpu"], cwd=cwd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    p.reader = threading.Thread(target=lambda: err.extend(iter(p.stderr.readline, "")), daemon=True)
    p.reader.start()
    return p, err


def _end(p) -> None:
    p.wait(timeout=120)
    p.reader.join(timeout=10)


def test_idle_watch_says_it_waits_and_ctrl_c_ends_it_quietly(network):
    val = network.clone("val")
    p, err = _start(val.root, "--watch", "--interval", "0.3")
    deadline = time.time() + 180
    while time.time() < deadline and not any("waiting for PRs" in line for line in err):
        time.sleep(0.2)
    assert any("waiting for PRs" in line for line in err), "".join(err)
    time.sleep(1.0)  # a few idle polls: the line is said once, not per poll
    p.send_signal(signal.SIGINT)
    _end(p)
    text = "".join(err)
    assert p.returncode == 0, text
    assert text.count("waiting for PRs") == 1
    assert "Traceback" not in text and "threading" not in text and "aborted" not in text, text
    assert "stopped watching: no verdict recorded" in " ".join(text.split())


def test_ctrl_c_while_validate_starts_says_nothing_changed(network):
    val = network.clone("val")
    p, err = _start(val.root, "--watch")
    wait_until_deferred(p)  # woolf is running (not the interpreter's own start-up) ...
    time.sleep(2.4)  # ... and on an idle machine still importing torch: the Ctrl-C waits until that is done
    p.send_signal(signal.SIGINT)
    _end(p)
    text = "".join(err)
    assert p.returncode in (0, 130), text
    assert "Traceback" not in text and "aborted" not in text, text
    assert "interrupted before validating anything" in text or "stopped watching" in text, text
