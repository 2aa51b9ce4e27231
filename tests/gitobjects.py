"""Hand-made git objects for the unit tests of the rules: trees, commits and refs built with git's
plumbing in a plain `git init` repository (no `woolf init`, no DVC, no hub), and repositories
built once per module and copied per test.

Usage:
    tree = tree_of(repo, {"ledger/woolf.toml": b"..."})            # nested dirs by mktree
    tree = tree_with(repo, commit, {"a/b": b"x", "old": None})      # commit's tree, changed
    sha = commit_tree(repo, tree, "message\n", [parent], key=key_for("val"), when=NOW)
    made = Templates(tmp_path_factory.mktemp("x"), Build)           # Build(path, *a, **kw).copy(dest)
    copy = made.copy_for(tmp_path, signed=True)
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

from tests.conftest import key_for
from woolf.git.repo import clean_env

IDENT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git_out(repo: Path, *args: str, input: bytes | None = None, env: dict | None = None) -> str:
    """git's stdout, stripped; a failing command fails the test with git's stderr."""
    proc = subprocess.run(["git", *args], cwd=repo, input=input, capture_output=True,
                          env=clean_env({**IDENT, **(env or {})}))
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()


_TREES: dict[tuple, str] = {}  # files -> tree id, reused where the repository holds it (a copy of a template)


def tree_of(repo: Path, files: dict) -> str:
    """A tree of ``files`` ({path: bytes}), nested directories made with mktree."""
    known = _TREES.get(key := tuple(sorted(files.items())))
    if known and (repo / ".git" / "objects" / known[:2] / known[2:]).exists():
        return known
    lines, dirs = [], {}
    for path, data in files.items():
        head, sep, rest = path.partition("/")
        if sep:
            dirs.setdefault(head, {})[rest] = data
        else:
            lines.append(f"100644 blob {git_out(repo, 'hash-object', '-w', '--stdin', input=data)}\t{head}")
    lines += [f"040000 tree {tree_of(repo, sub)}\t{name}" for name, sub in dirs.items()]
    _TREES[key] = git_out(repo, "mktree", input="".join(f"{ln}\n" for ln in lines).encode())
    return _TREES[key]


def tree_with(repo: Path, commit: str | None, changes: dict) -> str:
    """``commit``'s tree (None: empty) with ``changes`` made: {path: bytes | (mode, bytes) | None
    (delete)}; mode 160000 takes a commit id as its bytes. Through a private index file."""
    env = {"GIT_INDEX_FILE": str(repo / ".git" / "test-index")}
    git_out(repo, "read-tree", *([commit] if commit else ["--empty"]), env=env)
    for path, data in changes.items():
        if data is None:
            git_out(repo, "update-index", "--force-remove", path, env=env)
            continue
        mode, data = data if isinstance(data, tuple) else ("100644", data)
        oid = data.decode() if mode == "160000" else git_out(repo, "hash-object", "-w", "--stdin", input=data)
        git_out(repo, "update-index", "--add", "--cacheinfo", f"{mode},{oid},{path}", env=env)
    return git_out(repo, "write-tree", env=env)


def commit_tree(repo: Path, tree: str, message: str, parents=(), key: Path | None = None,
                when: int | None = None) -> str:
    """A commit of ``tree``; signed with the SSH key at ``key`` (git's gpg.format = ssh), dated ``when``."""
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
    stamp = {"GIT_COMMITTER_DATE": f"{when} +0000", "GIT_AUTHOR_DATE": f"{when} +0000"} if when else {}
    return git_out(repo, *sign, "commit-tree", tree, *(a for p in parents for a in ("-p", p)),
                   "-S" if key else "--no-gpg-sign", input=message.encode(), env=stamp)


def pub(name: str) -> str:
    """The public key of the test key named ``name`` (tests/conftest.py's key_for)."""
    return Path(f"{key_for(name)}.pub").read_text()


def copied(obj, dest: Path, root_attr: str = "repo"):
    """A shallow copy of ``obj`` whose repository (attribute ``root_attr``) is a copy at ``dest``."""
    shutil.copytree(getattr(obj, root_attr), dest)
    twin = copy.copy(obj)
    setattr(twin, root_attr, dest)
    return twin


class Templates:
    """One repository built per module for each set of arguments; every test gets its own copy."""

    def __init__(self, where: Path, build):
        self.where, self.build, self.made = where, build, {}

    def copy_for(self, tmp_path: Path, *args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in self.made:
            self.made[key] = self.build(self.where / f"template{len(self.made)}", *args, **kwargs)
        return self.made[key].copy(tmp_path / f"copy{len(list(tmp_path.iterdir()))}")
