"""Git.commit_tree_with: a commit of a base tree with files written, removed, or given a mode.

Plain `git init` repositories in tmp_path; what git itself stores is read back with `git ls-tree`.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from woolf.git.process import GitError
from woolf.git.repo import Git

pytestmark = pytest.mark.unit


def _git(cwd, *args) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "keep.txt").write_bytes(b"kept")
    (tmp_path / "gone.txt").write_bytes(b"removed")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return tmp_path


def test_files_are_written_removed_and_given_modes_byte_for_byte(repo):
    git = Git(repo)
    odd = os.fsdecode(b"dir/caf\xff.bin")  # not UTF-8: the bytes argv would have passed
    files = {"a/b.txt": b"crlf\r\nkept as is\r\n", "gone.txt": None, "never/there.txt": None,
             "link": ("120000", b"target"), odd: b"\x00\x01"}
    commit = git.commit_tree_with("main", files, "m", [git.rev_parse("main")])
    listing = _git(repo, "ls-tree", "-r", "-z", commit).split(b"\0")
    entries = {line.split(b"\t")[1]: line.split(b"\t")[0].split()[0] for line in listing if line}
    assert entries == {b"a/b.txt": b"100644", b"dir/caf\xff.bin": b"100644", b"keep.txt": b"100644",
                       b"link": b"120000"}
    assert _git(repo, "cat-file", "blob", f"{commit}:a/b.txt") == b"crlf\r\nkept as is\r\n"
    assert _git(repo, "cat-file", "blob", f"{commit}:link") == b"target"
    assert _git(repo, "rev-list", "--parents", "-n1", commit).split()[1:] == [git.rev_parse("main").encode()]


@pytest.mark.parametrize("path", ["../out", ".git/config", "a//b"])
def test_a_path_git_would_not_check_out_is_refused(repo, path):
    git = Git(repo)
    with pytest.raises(GitError, match="Ignoring path"):
        git.commit_tree_with("main", {"fine.txt": b"x", path: b"y"}, "m", [])
