"""One long-lived `git cat-file --batch-command` per repository (woolf/git/batch.py).

Each test builds a plain `git init` repository in tmp_path. The reader must answer what a git
process of its own would (git itself is the reference), see what is written after it started, and
hand the read back (NOT_SERVED) whenever it cannot answer, so that nothing depends on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from woolf.git import batch
from woolf.git.commits import commit_records, object_bytes
from woolf.git.repo import Git

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _repo(path: Path) -> Git:
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    return Git(path)


def _commit(git: Git, files: dict[str, bytes], parent: str | None = None, message: str = "m\n") -> str:
    base = parent or git.run("mktree", input=b"").stdout.decode().strip()
    return git.commit_tree_with(base, files, message, [parent] if parent else [])


def _one_shot(git: Git, name: str) -> bytes:
    return subprocess.run(["git", "cat-file", "--batch"], cwd=git.cwd, input=name.encode() + b"\n",
                          capture_output=True, check=True).stdout


@pytest.fixture
def git(tmp_path) -> Git:
    batch.close_all()
    yield _repo(tmp_path / "repo")
    batch.close_all()


def test_the_reader_answers_what_git_does(git):
    head = _commit(git, {"a.txt": b"alpha\n", "dir/b.bin": bytes(range(256)) * 40})
    for name in (head, f"{head}:a.txt", f"{head}:dir/b.bin", f"{head}^{{tree}}"):
        oid, kind, size = batch.info(git, name)
        assert _one_shot(git, name) == f"{oid} {kind} {size}\n".encode() + batch.contents(git, oid, size) + b"\n"
    assert batch.info(git, f"{head}:nope") is None and batch.info(git, "refs/heads/nope") is None
    assert git.rev_parse(head) == head and git.object_info(f"{head}:a.txt")[1:] == ("blob", 6)
    assert git.show_bytes(f"{head}:dir/b.bin") == bytes(range(256)) * 40
    assert len(batch._readers) == 1  # one process served every read


def test_names_git_would_misread_are_no_objects(git):
    head = _commit(git, {"a": b"x"})
    git.run("update-ref", "refs/heads/main", head)
    for name in ("refs/heads/main\n", "refs/heads/main\0evil", f"{head}\n{head}"):
        assert batch.info(git, name) is None
        assert git.rev_parse(name) is None
    assert git.rev_parse("refs/heads/main") == head
    assert batch.info(git, "x" * 100_000) is None  # a long name's "missing" line is read whole


def test_a_name_ending_in_cr_is_read_one_shot_and_the_reader_lives(git):
    """git strips a command line's CR: asked through the reader, "x\r" would be answered as "x" (and
    the mismatch ended the reader: a flood of such paths in PRs made a process per read twice over)."""
    head = _commit(git, {"a": b"x", "c\r": b"z"})
    assert git.rev_parse(head) == head
    [reader] = batch._readers.values()
    assert batch.info(git, f"{head}:c\r") is batch.NOT_SERVED
    assert git.show_bytes(f"{head}:c\r") == object_bytes(git, f"{head}:c\r", "blob", None)
    assert list(batch._readers.values()) == [reader] and reader.proc.poll() is None


def test_refs_and_objects_written_after_the_reader_started_are_seen(git, tmp_path):
    first = _commit(git, {"a": b"1"})
    git.run("update-ref", "refs/heads/main", first)
    assert git.rev_parse("refs/heads/main") == first
    second = _commit(git, {"a": b"2"}, parent=first)
    git.run("update-ref", "refs/heads/main", second)  # a loose ref moved
    assert git.rev_parse("refs/heads/main") == second
    git.run("pack-refs", "--all")
    third = _commit(git, {"a": b"3"}, parent=second)
    git.run("update-ref", "refs/heads/main", third)
    assert git.rev_parse("refs/heads/main") == third
    # objects that arrive in a new pack (a fetch from another repository), old loose ones packed away
    other = _repo(tmp_path / "other")
    theirs = _commit(other, {"b": b"theirs" * 1000})
    other.run("update-ref", "refs/heads/x", theirs)
    git.run("fetch", "-q", str(other.cwd), "refs/heads/x:refs/heads/x")
    git.run("repack", "-a", "-d", "-q")
    git.run("prune-packed")
    assert git.show_bytes(f"{theirs}:b") == b"theirs" * 1000
    assert git.show_bytes(f"{first}:a") == b"1"
    assert len(batch._readers) == 1


def test_a_killed_reader_is_replaced_and_the_read_still_answers(git):
    head = _commit(git, {"a": b"x"})
    assert git.rev_parse(head) == head
    [reader] = batch._readers.values()
    os.kill(reader.proc.pid, signal.SIGKILL)
    reader.proc.wait()
    assert object_bytes(git, f"{head}:a", "blob", None) == b"x"
    [again] = batch._readers.values()
    assert again is not reader


def test_a_repository_made_again_at_the_same_path_is_read_afresh(tmp_path):
    batch.close_all()
    path = tmp_path / "r"
    old = _repo(path)
    old_head = _commit(old, {"a": b"old"})
    assert old.rev_parse(old_head) == old_head
    subprocess.run(["rm", "-rf", str(path)], check=True)
    new = _repo(path)
    new_head = _commit(new, {"a": b"new"})
    assert new.show_bytes(f"{new_head}:a") == b"new"
    assert batch.info(new, old_head) is None  # (rev_parse remembers a commit id per path: woolf/git/memo.py)
    batch.close_all()


def test_at_most_max_readers_run_and_every_one_ends(tmp_path):
    batch.close_all()
    repos = [_repo(tmp_path / f"r{i}") for i in range(batch.MAX_READERS + 3)]
    heads = [_commit(g, {"a": str(i).encode()}) for i, g in enumerate(repos)]
    procs = []
    for g, h in zip(repos, heads, strict=True):
        assert g.show_bytes(f"{h}:a") is not None
        procs.extend(r.proc for r in batch._readers.values())
    assert len(batch._readers) == batch.MAX_READERS
    batch.close_all()
    assert not batch._readers and all(p.poll() is not None for p in procs)


def test_a_git_without_batch_command_reads_one_process_each(tmp_path, monkeypatch):
    """git before 2.36 has no --batch-command: its usage error (129) ends the reader for good,
    and every read is answered by a process of its own, as before."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    old = tmp_path / "bin"
    old.mkdir()
    (old / "git").write_text(f'#!/bin/sh\n[ "$1 $2" = "cat-file --batch-command" ] && exit 129\nexec {real} "$@"\n')
    (old / "git").chmod(0o755)
    batch.close_all()
    monkeypatch.setattr(batch, "_unsupported", [])
    monkeypatch.setenv("PATH", f"{old}{os.pathsep}{os.environ['PATH']}")
    git = _repo(tmp_path / "r")
    head = _commit(git, {"a": b"x"})
    assert git.rev_parse(head) == head  # the first read found out, and was read another way
    assert batch._unsupported and not batch._readers
    assert git.show_bytes(f"{head}:a") == b"x" and git.object_info(f"{head}:a")[1] == "blob"
    assert batch.info(git, head) is batch.NOT_SERVED


def test_many_commits_are_read_in_one_batch_and_agree_with_few(git):
    shas, parent = [], None
    for i in range(40):
        parent = _commit(git, {"a": str(i).encode()}, parent=parent, message=f"commit {i}\n\nbody\n")
        shas.append(parent)
    many = commit_records(git, shas)  # over the reader's few: two git processes
    few = [r for s in shas for r in commit_records(Git(git.cwd), [s])]
    assert many == few and [r[3] for r in many] == [f"commit {i}\n\nbody\n" for i in range(40)]


def test_a_forked_child_starts_its_own_reader(git):
    head = _commit(git, {"a": b"x"})
    assert git.rev_parse(head) == head
    [parent_reader] = batch._readers.values()
    code = ("import sys, os; sys.path.insert(0, sys.argv[1]); from pathlib import Path\n"
            "from woolf.git import batch; from woolf.git.repo import Git\n"
            "g = Git(Path(sys.argv[2]))\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    ok = g.show_bytes(sys.argv[3] + ':a') == b'x' and len(batch._readers) == 1\n"
            "    os._exit(0 if ok else 1)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print(os.waitstatus_to_exitcode(status), g.rev_parse(sys.argv[3]) == sys.argv[3])\n")
    # (a fresh interpreter forks after its first read: the child must not write into its parent's pipe)
    code = code.replace("pid = os.fork()", "g.rev_parse(sys.argv[3])\npid = os.fork()")
    out = subprocess.run([sys.executable, "-c", code, str(Path(batch.__file__).parents[2]), str(git.cwd), head],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", "True"], out.stderr
    assert parent_reader.proc.poll() is None
