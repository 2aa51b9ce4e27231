"""What a full object id names, read once per process (woolf/git/memo.py) — and nothing that may change.

Plain `git init` repositories in tmp_path; a second clone fetches commits the first has not seen.
"""

from __future__ import annotations

import subprocess

import pytest

from woolf.git import memo
from woolf.git.process import BlobTooLargeError, GitError
from woolf.git.repo import Git

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _empty_memo():
    memo.forget()
    yield
    memo.forget()


def _git(cwd, *args, data: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=data, check=True, capture_output=True).stdout.decode().strip()


def _commit(repo, files: dict[str, bytes], message="m") -> str:
    for path, data in files.items():
        (repo / path).write_bytes(data)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "a"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    return r


def test_a_blob_at_a_commit_is_read_once_and_a_ref_is_read_each_time(repo, monkeypatch):
    first = _commit(repo, {"f.txt": b"one"})
    git = Git(repo)
    assert git.show_bytes(f"{first}:f.txt") == b"one"
    calls = []
    monkeypatch.setattr(Git, "_blob", lambda self, spec, max_bytes: calls.append(spec) or b"from git")
    assert git.show_bytes(f"{first}:f.txt") == b"one"  # remembered: no git process
    assert calls == []
    assert git.show_bytes("main:f.txt") == b"from git"  # a ref name may move: read again
    assert calls == ["main:f.txt"]


def test_a_remembered_blob_still_obeys_max_bytes(repo):
    c = _commit(repo, {"f.txt": b"x" * 100})
    git = Git(repo)
    assert git.show_bytes(f"{c}:f.txt") == b"x" * 100
    with pytest.raises(BlobTooLargeError):
        git.show_bytes(f"{c}:f.txt", max_bytes=10)
    memo.forget()
    with pytest.raises(BlobTooLargeError):  # and without the memo, before reading it
        git.show_bytes(f"{c}:f.txt", max_bytes=10)


def test_absent_is_remembered_only_for_a_commit_this_repository_has(repo, tmp_path):
    c1 = _commit(repo, {"f.txt": b"one"})
    clone = tmp_path / "b"
    _git(tmp_path, "clone", "-q", str(repo), str(clone))
    c2 = _commit(repo, {"g.txt": b"two"})
    git = Git(clone)
    assert git.show_bytes(f"{c2}:g.txt") is None  # not fetched yet: absent now, not for good
    assert git.rev_parse(c1) == c1  # c1 is known to be here ...
    assert git.show_bytes(f"{c1}:g.txt") is None  # ... so its missing path stays missing
    assert memo.recall(memo.immutable(str(clone), f"{c1}:g.txt")) is memo.MISSING
    _git(clone, "fetch", "-q", "origin")
    assert git.show_bytes(f"{c2}:g.txt") == b"two"
    assert git.rev_parse(c2) == c2


def test_commit_records_come_from_the_memo_and_keep_order_and_limits(repo):
    shas = [_commit(repo, {"f.txt": str(i).encode()}, message=f"message {i}") for i in range(3)]
    git = Git(repo)
    first = git.commit_records(list(reversed(shas)))
    assert [r[0] for r in first] == list(reversed(shas)) and first[0][3].startswith("message 2")
    again = git.commit_records([shas[1], "HEAD", shas[1]])  # a ref is resolved by git; repeats kept
    assert [r[0] for r in again] == [shas[1], shas[2], shas[1]]
    assert git.commit_records(shas, max_bytes=10) == []  # every commit is over 10 bytes, memo or not


def test_repositories_do_not_share_what_they_have(repo, tmp_path):
    c = _commit(repo, {"f.txt": b"one"})
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    assert Git(repo).show_bytes(f"{c}:f.txt") == b"one"
    assert Git(other).show_bytes(f"{c}:f.txt") is None  # not in this repository
    assert Git(other).commit_records([c]) == [] and Git(repo).commit_records([c])[0][0] == c


def test_parents_of_a_full_id_are_read_once_per_repository(repo, tmp_path, monkeypatch):
    first = _commit(repo, {"f.txt": b"one"})
    second = _commit(repo, {"f.txt": b"two"})
    other = tmp_path / "b"
    other.mkdir()
    _git(other, "init", "-q", "-b", "main")
    git, elsewhere = Git(repo), Git(other)
    assert git.parents(second) == [first] and git.parents(first) == []
    runs = []
    real = Git.out
    monkeypatch.setattr(Git, "out", lambda self, *a, **kw: runs.append(a) or real(self, *a, **kw))
    assert git.parents(second) == [first] and git.parents(first) == []  # remembered: no git process
    assert runs == []
    assert git.parents("main") == [first] and len(runs) == 1  # a ref name may move: read again
    with pytest.raises(GitError):  # another repository has not got it: what this one had is not shared
        elsewhere.parents(second)
