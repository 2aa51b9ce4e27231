"""Files written atomically and hashed once: the torch-free I/O helpers.

Usage:
    write_bytes_atomic(data, path); copy_atomic(src, out)
    md5, sha = hashes_of_file(path)       # one read; md5 and sha256 in helper threads beside it
    job = HashJob(path, "md5"); ...; md5 = job.result()   # one hash of a file in its own helper thread
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from woolf.errors import UsageError


def make_dir(path: Path, what: str) -> None:
    """``mkdir -p path``; a path under a file or in a read-only directory is a one-line UsageError naming the
    argument (``what``) it came from, never a traceback."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = next((str(p) for p in [Path(path), *Path(path).parents] if p.exists()), str(path))
        why = "a file is in the way" if Path(where).is_file() else exc.strerror
        raise UsageError(f"{what} {path}: cannot create it ({why}: {where})",
                         hint="choose a path in a directory you can write") from None


def write_bytes_atomic(data: bytes, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_atomic(src: Path, out: Path) -> None:
    """Copy by temp file + rename: ``out`` is never a half-written file, nor a link to ``src``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)


_POOLS: dict[str, ThreadPoolExecutor] = {}


def hash_pool(name: str = "md5") -> ThreadPoolExecutor:
    """One helper thread per hash (hashlib releases the GIL on large buffers): md5 and sha256 run
    beside each other and beside the read or write that feeds them, each updated in order."""
    if name not in _POOLS:
        _POOLS[name] = ThreadPoolExecutor(1, thread_name_prefix=f"woolf-{name}")
    return _POOLS[name]


def hashes_of_file(path: Path, chunk: int = 8 * 1024 * 1024) -> tuple[str, str]:
    """(md5, sha256) in one read: DVC addresses by md5, the ledger records sha256.

    Both hashes run in helper threads while the next block is read, so the pair
    costs about as much as md5 alone.
    """
    digests = Digests()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digests.update(block)
    return digests.hexdigests()


class Digests:
    """md5 and sha256 of a stream fed block by block, each in its own helper thread: hash bytes on their way.

    ``update(block)`` returns while ``block`` is still being hashed: the caller keeps it
    unchanged until its next ``update`` or ``hexdigests`` (which wait for the previous block);
    ``update(b"")`` only waits (a reader that reuses its buffer calls it before overwriting).
    ``md5=False``: sha256 alone, md5 then None.
    """

    def __init__(self, md5: bool = True):
        self.md5 = hashlib.md5(usedforsecurity=False) if md5 else None
        self.sha = hashlib.sha256()
        self._pending: list = []

    def _wait(self) -> None:
        for f in self._pending:
            f.result()
        self._pending = []

    def update(self, block) -> None:
        self._wait()
        hashes = [h for h in (self.md5, self.sha) if h is not None]
        if len(block) < 1 << 16:  # small blocks: threads would cost more than they save
            for h in hashes:
                h.update(block)
            return
        self._pending = [hash_pool(h.name).submit(h.update, block) for h in hashes]

    def hexdigests(self) -> tuple[str | None, str]:
        self._wait()
        return (self.md5.hexdigest() if self.md5 is not None else None), self.sha.hexdigest()


class HashJob:
    """md5 or sha256 of a file in a helper thread of its own, from its own read of the inode opened now
    (a delta's storage hashes run beside its checks, merge and evaluation). ``start=False``:
    the file is opened now and hashed from ``start()`` on.

    ``result()`` waits and returns the hex digest (an OSError of the read is raised there); ``close()``
    waits and drops the file. The file must not change meanwhile (a cache object: read-only)."""

    def __init__(self, path: Path, name: str = "md5", chunk: int = 8 << 20, start: bool = True):
        self._fd = os.open(path, os.O_RDONLY)
        self._name, self._chunk, self._future = name, chunk, None
        if start:
            self.start()

    def start(self) -> None:
        """Begin hashing (once; ``result`` starts it too)."""
        if self._future is None and self._fd is not None:
            self._future = hash_pool(f"{self._name}-job").submit(self._run, self._name, self._chunk)

    def _run(self, name: str, chunk: int) -> str:
        h, buf = hashlib.new(name, usedforsecurity=False), bytearray(chunk)
        view = memoryview(buf)
        with open(self._fd, "rb", buffering=0, closefd=False) as fh:
            while n := fh.readinto(buf):
                h.update(view[:n])
        return h.hexdigest()

    def result(self) -> str:
        self.start()
        try:
            return self._future.result()
        finally:
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            try:
                if self._future is not None:
                    self._future.exception()  # waits: the thread is done with the descriptor
            finally:
                os.close(self._fd)
                self._fd = None


def link_readonly(src: Path, dest: Path) -> bool:
    """Hard-link the regular file ``src`` at ``dest`` (which must not exist); False where it cannot be.

    Only for content-addressed objects nobody writes again: the inode is made
    read-only (0444), so the cache and a same-filesystem storage share bytes but
    no workspace file ever does (checkouts copy). A symbolic link is never followed.
    Only a file this user owns is linked: another user's object (a participant's
    delta in a shared directory) could be rewritten by its owner, mtime and all,
    so it is copied, and this clone's cache stays a copy of its own.
    """
    try:
        os.link(src, dest, follow_symlinks=False)
    except (OSError, NotImplementedError):
        return False

    st = os.lstat(dest)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.unlink(dest)
        return False
    if st.st_mode & 0o222:
        try:
            os.chmod(dest, 0o444)
        except OSError:  # not ours to protect: use a copy instead
            os.unlink(dest)
            return False
    return True


def md5_file(path: Path, chunk: int = 8 * 1024 * 1024) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
