"""Commits read as attacker-written: size first, and many at once framed by size.

Usage:
    raw = commit_bytes(git, sha)                  # BlobTooLargeError over COMMIT_MAX_BYTES, never read
    for sha, parents, time, message in commit_records(git, shas): ...
    parents, message = read_commit(git, sha)      # remembered per commit id for the process

`git log --format=...%x1e` output is split on bytes that anyone can write into
a commit message; `git cat-file --batch` prints each object after its size, so
a record ends where git says it does. (Git.commit_bytes / Git.commit_records
call these.)
"""

from __future__ import annotations

import re
import subprocess

from woolf.git import batch, memo
from woolf.git.process import COMMIT_MAX_BYTES, BlobTooLargeError, GitError, as_text, clean_env


def commit_bytes(git, commit: str, max_bytes: int = COMMIT_MAX_BYTES) -> bytes:
    """A commit object's bytes (header and message). Its size is read first: over ``max_bytes``
    (only a hand-made commit is) raises BlobTooLargeError, and the object is never read."""
    raw = object_bytes(git, f"{commit}^{{commit}}", "commit", max_bytes, f"commit {commit[:12]}")
    if raw is None:
        raise GitError(("cat-file", "commit", commit[:80]), 128, "not a commit")
    return raw


def object_bytes(git, name: str, kind: str, max_bytes: int | None, label: str | None = None) -> bytes | None:
    """The bytes of the object ``name`` (anything `git rev-parse` reads) when it is a ``kind``; None when
    it is missing or another kind. One `git cat-file --batch`: its type and size are read first, and
    one over ``max_bytes`` raises BlobTooLargeError (``label`` names it) unread."""
    if "\n" in name:
        return None
    got = _served(git, name, kind, max_bytes, label)  # the repository's reader: no process per read
    if got is not batch.NOT_SERVED:
        return None if got is None else got[1]
    proc = subprocess.Popen(["git", "cat-file", "--batch"], cwd=git.cwd, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=clean_env({**git.identity_env(), **git.keep_env}))
    try:
        try:
            proc.stdin.write(name.encode() + b"\n")
            proc.stdin.close()
        except OSError:  # git ended at once (not a repository): nothing to read
            return None
        header = proc.stdout.readline(len(name) + 512).split()
        if len(header) != 3 or header[1] != kind.encode() or not header[2].isdigit():
            return None  # missing, ambiguous, or another kind
        size = int(header[2])
        if max_bytes is not None and size > max_bytes:
            raise BlobTooLargeError(label or name, size, max_bytes)
        data = proc.stdout.read(size)
        return data if len(data) == size else None
    finally:
        _end(proc)


def _end(proc: subprocess.Popen) -> None:
    """Close both pipes and reap git: it ends at the end of its input, or at once on a closed pipe when
    it was still writing (an object too large to read). A blocking wait, as for every other git call
    (Git.run): a wait with a timeout polls, and slept a millisecond or more on nearly every read."""
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:  # git already gone: its end of the pipe was closed
            pass
    proc.wait()


_OID = re.compile(rb"[0-9a-fA-F]{40}(?:[0-9a-fA-F]{24})?")  # git reads either case (get_oid_hex)


def parents_of(lines: list[bytes]) -> list[str] | None:
    """The parents git itself reads: the `parent <id>` lines right after the `tree` line, and no
    others (a `parent` line further down is an extra header git ignores, and fsck allows). None
    when git would refuse the commit (no tree line first, or a malformed id in that block).
    ``lines``: the commit's header, split on newlines."""
    if not lines[0].startswith(b"tree "):
        return None
    parents = []
    for ln in lines[1:]:
        if not ln.startswith(b"parent "):
            break
        oid = ln[7:]
        if not _OID.fullmatch(oid):
            return None
        parents.append(oid.decode().lower())  # the id git means: rev-list prints it lower-case
    return parents


def commit_records(git, shas: list[str], max_bytes: int = COMMIT_MAX_BYTES) -> list[tuple[str, list[str], int, str]]:
    """(sha, parents, committer time, message) of each commit, in order, from `cat-file --batch`:
    framed by each object's size, so no byte of a message can split or forge a record (a
    `git log --format` separator can be written into a message). Commits that are missing,
    malformed (git would not parse them), over ``max_bytes`` or without a readable committer
    time are left out. A full commit id's record is remembered for the process (woolf/git/memo.py):
    a ledger's log is read for every PR, and only its new commits are read again."""
    shas = [s for s in shas if s and "\n" not in s]
    repo = str(git.cwd)
    found = {s: memo.recall(memo.immutable(repo, s, "record")) for s in shas}
    found.update(_read_records(git, [s for s, hit in found.items() if hit is memo.NOT_KNOWN],
                               max(max_bytes, COMMIT_MAX_BYTES)))
    return [(r[0], list(r[1]), r[2], r[3]) for r in (found[s] for s in shas)
            if r is not memo.NOT_KNOWN and r[4] <= max_bytes]


def _read_records(git, names: list[str], max_bytes: int) -> dict[str, tuple]:
    """{name: (sha, parents, committer time, message, size)} of each of ``names`` that is a readable
    commit of at most ``max_bytes``; each remembered under its full id."""
    out, repo = {}, str(git.cwd)
    for name, sha, body in _commit_bodies(git, names, max_bytes):
        header, _, message = body.partition(b"\n\n")
        lines = header.split(b"\n")
        parents = parents_of(lines)
        stamp = next((ln.rsplit(b" ", 2)[-2:] for ln in lines if ln.startswith(b"committer ")), [b""])[0]
        if parents is not None and stamp.isdigit() and len(stamp) <= 12:
            out[name] = record = (sha, tuple(parents), int(stamp), as_text(message), len(body))
            memo.known_commit(repo, sha)
            memo.remember(memo.immutable(repo, sha, "record"), record, len(body) + 128)
    return out


def _commit_bodies(git, names: list[str], max_bytes: int) -> list[tuple[str, str, bytes]]:
    """(name, commit id, bytes) of each of ``names`` that is a commit of at most ``max_bytes``: a few
    through the repository's reader (woolf/git/batch.py), many with two git processes (every
    size first, then the bodies of those under the limit)."""
    if not names:
        return []
    if len(names) <= _FEW:
        got = [_served_commit(git, name, max_bytes) for name in names]
        if all(g is not batch.NOT_SERVED for g in got):
            return [(name, *g) for name, g in zip(names, got, strict=True) if g is not None]
    checked = git.run("cat-file", "--batch-check", input=("\n".join(names) + "\n").encode()).stdout.split(b"\n")
    small = [(name, h[0].decode()) for name, h in zip(names, (ln.split() for ln in checked), strict=False)
             if len(h) == 3 and h[1] == b"commit" and h[2].isdigit() and int(h[2]) <= max_bytes]
    names = ("\n".join(o for _, o in small) + "\n").encode()
    raw = git.run("cat-file", "--batch", input=names).stdout if small else b""
    out, pos = [], 0
    for name, _ in small:
        end = raw.find(b"\n", pos)
        head = raw[pos:end if end >= 0 else len(raw)].split()
        if end < 0 or len(head) != 3 or not head[2].isdigit():
            break  # "<name> missing" is never printed for these; anything else ends the reading
        size = int(head[2])
        out.append((name, head[0].decode(), raw[end + 1:end + 1 + size]))
        pos = end + 2 + size
    return out


_FEW = 16  # up to this many commits are read one by one through the reader; more in one batch


def _served(git, name: str, kind: str, max_bytes: int | None, label: str | None = None):
    """(object id, bytes) of ``name`` through the reader (woolf/git/batch.py); None when it is no ``kind``
    object; NOT_SERVED when the reader could not answer. One over ``max_bytes`` raises BlobTooLargeError
    unread (its size comes first)."""
    info = batch.info(git, name)
    if info is batch.NOT_SERVED:
        return info
    if info is None or info[1] != kind:
        return None
    if max_bytes is not None and info[2] > max_bytes:
        raise BlobTooLargeError(label or name, info[2], max_bytes)
    data = batch.contents(git, info[0], info[2])
    return data if data is batch.NOT_SERVED else (info[0], data)


def _served_commit(git, name: str, max_bytes: int):
    """As _served for a commit record: one over ``max_bytes`` is no record (None), as in the batch path."""
    try:
        return _served(git, name, "commit", max_bytes)
    except BlobTooLargeError:
        return None


COMMIT_ID = memo.FULL_ID  # a full commit id: names its bytes forever, so may be cached
_READ: dict[str, tuple[list[str], str]] = {}  # commit id -> (parents, message): a commit id names its bytes


def read_commit(git, commit: str) -> tuple[list[str], str]:
    """(parents, message) of a commit in one git call; remembered per commit id for the process.

    Over git.COMMIT_MAX_BYTES raises BlobTooLargeError unread; a commit git would refuse to parse
    raises GitError."""
    if commit in _READ:
        parents, message = _READ[commit]
        return list(parents), message
    header, _, body = commit_bytes(git, commit).partition(b"\n\n")
    parents, message = parents_of(header.split(b"\n")), body.decode(errors="replace")
    if parents is None:
        raise GitError(("cat-file", "commit", commit[:80]), 128, "a malformed commit git itself would not read")
    if COMMIT_ID.match(commit) and len(message) <= 65536:  # a hostile giant is read again, never kept
        if len(_READ) > 4096:
            _READ.clear()
        _READ[commit] = (list(parents), message)
    return parents, message
