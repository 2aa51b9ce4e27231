"""Object reads through one long-lived `git cat-file --batch-command` per repository.

Usage:
    info = batch.info(git, "refs/heads/main^{commit}")   # (oid, type, size), None if missing, NOT_SERVED
    data = batch.contents(git, oid, size)                # the object's bytes, or NOT_SERVED
    batch.close_all()                                    # end every reader (atexit does it too)

A validator reads thousands of small objects (commits, pointers, submission records); one
`git` process per read cost ~1.4 ms of process start each, most of an object read. A reader is kept
per repository (its directory, its identity on disk and the GIT_* variables it keeps: a hook's
quarantine), started with the environment of that moment, at most MAX_READERS at once, the least
recently used ended first.

Whatever goes wrong with a reader (git older than 2.36 without --batch-command, a git that
died, a reply that is not what git prints, another process after a fork) ends it and answers
NOT_SERVED: the caller reads with a process of its own, as before. Objects are immutable; a
ref name is resolved by git at each request (loose refs are read, packed-refs re-checked),
and git looks for packs again when an object is not in those it knows.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
from collections import OrderedDict

from woolf.git.process import clean_env

MAX_READERS = 8
NOT_SERVED = object()  # the reader could not answer: read another way
_HEADER_SLACK = 512  # "<oid> <type> <size>" or "<name> missing" fits in the name's length and this
_readers: OrderedDict[tuple, _Reader] = OrderedDict()
_lock = threading.Lock()
_unsupported: list[bool] = []  # set once when this git has no --batch-command


class _Broken(Exception):
    """The reader's process did not answer as git does: it is ended."""


class _Reader:
    def __init__(self, cwd: str, env: dict):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(["git", "cat-file", "--batch-command"], cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def ask(self, command: bytes, limit: int) -> bytes:
        try:
            self.proc.stdin.write(command + b"\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline(limit)
        except (OSError, ValueError) as exc:
            raise _Broken from exc
        if not line.endswith(b"\n"):
            raise _Broken  # git ended (EOF), or a header longer than git ever prints
        return line[:-1]

    def read(self, size: int) -> bytes:
        try:
            data = self.proc.stdout.read(size + 1)
        except (OSError, ValueError) as exc:
            raise _Broken from exc
        if len(data) != size + 1 or data[-1:] != b"\n":
            raise _Broken
        return data[:-1]

    def end(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc.wait()  # git ends at the end of its input


def _key(git) -> tuple | None:
    """The repository as it is on disk now (a directory removed and made again is another one) and the
    GIT_* variables its git keeps (a hook's quarantine). A reader runs with the environment of the
    moment it started (clean_env), as any long-lived process does: computed per read, it cost more
    than a read."""
    try:
        st = os.stat(git.cwd)
    except OSError:
        return None
    return str(git.cwd), st.st_dev, st.st_ino, tuple(sorted(git.keep_env.items()))


def _reader(git) -> tuple[tuple, _Reader] | None:
    if _unsupported:
        return None
    key = _key(git)
    if key is None:
        return None
    with _lock:
        reader = _readers.get(key)
        if reader is not None and reader.pid == os.getpid() and reader.proc.poll() is None:
            _readers.move_to_end(key)
            return key, reader
        if reader is not None:
            _drop(key)
        try:
            reader = _Reader(key[0], clean_env(dict(key[3])))
        except OSError:
            return None
        _readers[key] = reader
        while len(_readers) > MAX_READERS:
            _drop(next(iter(_readers)))
    return key, reader


def _drop(key: tuple) -> None:
    reader = _readers.pop(key, None)
    if reader is not None and reader.pid == os.getpid():
        try:
            reader.end()
        except OSError:
            pass


def _fail(key: tuple, reader: _Reader) -> None:
    with _lock:
        if _readers.get(key) is reader:
            _drop(key)
        elif reader.pid == os.getpid():
            reader.end()
    if reader.proc.returncode == 129 and not _unsupported:  # git's usage error: no --batch-command here
        _unsupported.append(True)


def info(git, name: str):
    """(oid, type, size) of ``name`` (anything `git rev-parse` reads), None when git says it is
    missing or ambiguous, NOT_SERVED when no reader could ask."""
    if "\n" in name or "\0" in name:
        return None
    if name.endswith("\r"):  # git reads a command line without its CR: the name would not be the one asked
        return NOT_SERVED
    found = _reader(git)
    if found is None:
        return NOT_SERVED
    key, reader = found
    raw = name.encode()
    with reader.lock:
        try:
            line = reader.ask(b"info " + raw, len(raw) + _HEADER_SLACK)
        except _Broken:
            _fail(key, reader)
            return NOT_SERVED
    if line in (raw + b" missing", raw + b" ambiguous"):
        return None
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].isdigit():
        _fail(key, reader)
        return NOT_SERVED
    return parts[0].decode(), parts[1].decode(), int(parts[2])


def contents(git, oid: str, size: int):
    """The bytes of object ``oid`` (as ``info`` named it, ``size`` long), or NOT_SERVED."""
    found = _reader(git)
    if found is None:
        return NOT_SERVED
    key, reader = found
    with reader.lock:
        try:
            line = reader.ask(b"contents " + oid.encode(), len(oid) + _HEADER_SLACK)
            parts = line.split(b" ")
            if len(parts) != 3 or parts[0] != oid.encode() or parts[2] != str(size).encode():
                raise _Broken
            return reader.read(size)
        except _Broken:
            _fail(key, reader)
            return NOT_SERVED


def close_all() -> None:
    """End every reader this process started."""
    with _lock:
        for key in list(_readers):
            _drop(key)


def _forget_in_child() -> None:
    """After a fork (multiprocessing, a DataLoader worker): the child closes its copies of the readers'
    pipes, so that a reader still ends when its process closes it, and starts readers of its own."""
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    for reader in _readers.values():
        for stream in (reader.proc.stdin, reader.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
    _readers.clear()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_in_child)
