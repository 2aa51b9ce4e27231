"""The git wrapper's fetch when another process of the same clone holds a ref it updates (woolf/git/repo.py).

A `woolf train` pushes each task record and mirrors it into its clone's refs; a `woolf tasks` (or the
test that watches the trainer) fetches the same refs at the same moment. Git refuses a ref update whose
lock another process holds, or whose value moved since the fetch read it ("cannot lock ref"); the fetch
tries again and reads the new value, and a record's push is not undone by a mirror it could not write.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from woolf.errors import ForgeError
from woolf.git.repo import Git
from woolf.protocol.tasks import TaskRecord, push_record, task_ref

pytestmark = pytest.mark.unit

REF = "refs/woolf/task/20261207T000000000Z-alice-0a1b2c3d"


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin:/usr/local/bin"}).stdout.strip()


@pytest.fixture
def clone(tmp_path) -> tuple[Git, Path, str]:
    """A bare origin with a commit at REF, and a clone of it that has not fetched REF yet."""
    origin = tmp_path / "origin.git"
    _git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    _git("clone", "-q", str(origin), str(tmp_path / "clone"), cwd=tmp_path)
    work = tmp_path / "clone"
    base = _git("commit-tree", _git("mktree", cwd=work), "-m", "base", cwd=work)
    _git("push", "-q", "origin", f"{base}:refs/heads/main", f"{base}:{REF}", cwd=work)
    return Git(work), work, base


def _hold_lock(work: Path, ref: str) -> Path:
    """What another git process updating ``ref`` holds meanwhile: its lock file."""
    lock = work / ".git" / f"{ref}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    return lock


def test_a_fetch_that_finds_a_ref_locked_by_another_process_fetches_again(clone):
    git, work, base = clone
    lock = _hold_lock(work, REF)
    proc = subprocess.run(["git", "fetch", "-q", "origin", "+refs/woolf/task/*:refs/woolf/task/*"], cwd=work,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "cannot lock ref" in proc.stderr  # what git itself does once
    releaser = threading.Timer(0.3, lock.unlink)  # the other process finishes its update
    releaser.start()
    try:
        git.fetch("origin", "+refs/woolf/task/*:refs/woolf/task/*")
    finally:
        releaser.join()
    assert git.rev_parse(REF) == base


def test_a_lock_that_is_never_released_is_still_an_error(clone, monkeypatch):
    git, work, _ = clone
    _hold_lock(work, REF)
    monkeypatch.setattr("woolf.git.repo._REF_LOCK_PAUSES", (0.01,))  # the number of tries is not the point
    with pytest.raises(ForgeError, match="File exists"):
        git.fetch("origin", "+refs/woolf/task/*:refs/woolf/task/*")


def test_a_task_record_is_pushed_even_where_its_local_mirror_is_locked(clone):
    git, work, base = clone
    rec = TaskRecord("20261207T000000000Z-alice-0a1b2c3d", "started", "alice", 0, base, "alice@v0", 5, 30.0)
    assert task_ref(rec.id) == REF
    git.fetch("origin", "+refs/woolf/task/*:refs/woolf/task/*")
    _hold_lock(work, REF)  # a `woolf tasks` in the same clone fetching the task refs at this moment
    tip = push_record(git, rec, base)
    assert _git("rev-parse", REF, cwd=work.parent / "origin.git") == tip  # the record is origin's
