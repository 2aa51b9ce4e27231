"""Files written atomically and hashed once: the torch-free I/O helpers.

Usage:
    write_bytes_atomic(data, path); copy_atomic(src, out)
    md5, sha = hashes_of_file(path)       # one read; md5 in a helper thread beside sha256
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


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


def sha256_file(path: Path, chunk: int = 8 * 1024 * 1024) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


_HASH_POOL: ThreadPoolExecutor | None = None


def hashes_of_file(path: Path, chunk: int = 8 * 1024 * 1024) -> tuple[str, str]:
    """(md5, sha256) in one read: DVC addresses by md5, the ledger records sha256.

    md5 runs in a helper thread beside sha256 (hashlib releases the GIL on large
    buffers), so the pair costs about as much as md5 alone.
    """
    global _HASH_POOL
    if _HASH_POOL is None:
        _HASH_POOL = ThreadPoolExecutor(1, thread_name_prefix="woolf-md5")
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    pending = None
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            if pending is not None:
                pending.result()
            pending = _HASH_POOL.submit(md5.update, block)
            sha.update(block)
    if pending is not None:
        pending.result()
    return md5.hexdigest(), sha.hexdigest()


def md5_file(path: Path, chunk: int = 8 * 1024 * 1024) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
