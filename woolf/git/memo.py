"""What a full object id names, remembered per repository for the life of the process.

Usage (woolf/git/repo.py and woolf/git/commits.py use it; nothing else needs to):
    key = immutable(repo_dir, spec)   # None unless spec is "<40-hex id>" or "<40-hex id>:<path>"
    hit = recall(key)                 # NOT_KNOWN, MISSING (a path its commit does not have), or the value
    remember(key, value, size)        # bounded: everything is forgotten past MAX_ENTRIES or MAX_BYTES
    known_commit(repo_dir, sha)       # this repository has this commit ...
    absent_for_good(key)              # ... so "<sha>:<path>" that git did not find is absent forever

A full object id names the same bytes forever (git refuses colliding objects: SHA-1DC), and a
commit's tree never changes, so "<commit>:<path>" is either always the same blob or always
absent — once the commit is known to be in the repository. Keys carry the repository's
directory: whether a repository has an object is not shared between repositories. An id that
was absent is never remembered as absent (it may be fetched later); an abbreviated id or a ref
name (`main`, `HEAD~1`) is never remembered at all. A validator reads the same pointers,
configs and commit messages for every PR of a pass: each is one git process once, not per read.
"""

from __future__ import annotations

import re

FULL_ID = re.compile(r"\A[0-9a-f]{40}\Z")  # a full commit id (woolf/git/commits.py COMMIT_ID is this one)
MAX_ENTRIES = 8192
MAX_BYTES = 64 << 20
MAX_ONE = 1 << 20  # a larger value is read again each time rather than kept
NOT_KNOWN, MISSING = object(), object()

_VALUES: dict[tuple, object] = {}
_COMMITS: set[tuple[str, str]] = set()
_size = 0


def immutable(repo: str, spec: str, kind: str = "blob") -> tuple | None:
    """The memo key of ``spec`` in ``repo`` (``kind``: what is remembered), or None when it may change."""
    sha, sep, path = spec.partition(":")
    if not FULL_ID.match(sha) or "\n" in path or (sep and not path):
        return None
    return kind, repo, sha, path


def recall(key: tuple | None):
    return NOT_KNOWN if key is None else _VALUES.get(key, NOT_KNOWN)


def absent_for_good(key: tuple | None) -> bool:
    """``key`` names a path in a commit this repository is known to have: git not finding it is final."""
    return key is not None and bool(key[3]) and (key[1], key[2]) in _COMMITS


def remember(key: tuple | None, value, size: int = 0) -> None:
    global _size
    if key is None or size > MAX_ONE:
        return
    if len(_VALUES) >= MAX_ENTRIES or _size + size > MAX_BYTES:
        forget()
    _VALUES[key] = value
    _size += size


def known_commit(repo: str, sha: str) -> None:
    if FULL_ID.match(sha):
        if len(_COMMITS) >= MAX_ENTRIES:
            _COMMITS.clear()
        _COMMITS.add((repo, sha))


def forget() -> None:
    global _size
    _VALUES.clear()
    _COMMITS.clear()
    _size = 0
