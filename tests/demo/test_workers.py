"""The demo's worker processes: never shadowed by a `woolf/` folder in the cwd; a dead one fails the demo."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import woolf
from woolf.demo import workers
from woolf.demo.workers import WorkerDied, check_alive, spawn


def _shadow(where):
    """What `git clone ... woolf` leaves in the cwd: a folder named woolf without the package's modules."""
    for sub in ("woolf", "woolf/ledger"):
        (where / sub).mkdir(parents=True)
        (where / sub / "__init__.py").write_text("")


def test_a_worker_that_died_is_an_error_naming_it_and_quoting_its_log(tmp_path):
    logs = tmp_path / "logs"
    p = spawn(["participant", str(tmp_path / "no-such-clone"), "--name", "p1", "--rounds", "1"], logs / "p1.log")
    ok = spawn(["--help"], logs / "v1.log")
    deadline = time.time() + 60
    while p.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    ok.wait(60)
    with pytest.raises(WorkerDied, match=r"worker p1 died \(exit status 1\): error: .*no-such-clone") as e:
        check_alive({"v1": ok, "p1": p}, logs)
    assert str(logs / "p1.log") in e.value.hint
    check_alive({"v1": ok}, logs)  # exit 0: alive enough


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the 3.10 line names woolf.demo.worker itself")
def test_workers_keep_pythonpath_and_ignore_the_cwd(tmp_path, monkeypatch):
    _shadow(tmp_path)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "probe_mod.py").write_text("import woolf.ledger.ledger, woolf; print(woolf.__file__)\n")
    monkeypatch.setenv("PYTHONPATH", str(extra))
    cmd = [c if c != workers.MODULE else "probe_mod" for c in workers.command()]
    out = subprocess.run(cmd, env=workers.worker_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr  # probe_mod found: PYTHONPATH is honoured
    assert out.stdout.strip() == str(Path(woolf.__file__).resolve())  # this process's woolf, not the cwd's
