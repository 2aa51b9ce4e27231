"""Text that every Python install has: the standard library's own sources.

Usage:
    files = pool_files()                       # training pool, relative paths
    bench = benchmark_text(32768)              # held-out text (written into a ledger at init)
    shard = assign_shard("alice", base_version=3, k=8)

The benchmark is drawn from files whose path hash falls in a fixed bucket, and
the training pool excludes those files, so a participant never trains on the
held-out text. A participant's shard is a pure function of (contributor, base
version): anyone can recompute which files it was given.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import sysconfig
from pathlib import Path

_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__",
              "lib2to3", "turtledemo", "ensurepip"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _is_benchmark(rel: str) -> bool:
    return hashlib.sha256(rel.encode()).digest()[0] % 16 == 0


@functools.lru_cache(maxsize=1)
def _all_files() -> tuple[str, ...]:
    """The corpus's files: .py files of at least 2000 bytes outside _SKIP_DIRS. The walk never enters
    a skipped directory (the interpreter's own site-packages can hold thousands: 0.41 s against
    0.008 s per process here), so the list is the same as filtering a full rglob."""
    root = stdlib_root()
    out = []
    for where, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        for name in files:
            if name.endswith(".py") and (path := Path(where) / name).stat().st_size >= 2000:
                out.append(path.relative_to(root).as_posix())
    return tuple(sorted(out))


def pool_files() -> list[str]:
    return [f for f in _all_files() if not _is_benchmark(f)]


def read(rel: str) -> bytes:
    return (stdlib_root() / rel).read_bytes()


def benchmark_text(size: int) -> bytes:
    """``size`` bytes from the held-out files, in a fixed order."""
    chunks, total = [], 0
    for rel in (f for f in _all_files() if _is_benchmark(f)):
        data = read(rel)[:4096]
        chunks.append(data)
        total += len(data)
        if total >= size:
            break
    return b"".join(chunks)[:size]


def assign_shard(contributor: str, base_version: int, k: int = 8) -> list[str]:
    seed = hashlib.sha256(f"woolf-shard:{contributor}:{base_version}".encode()).digest()
    rng = random.Random(seed)
    files = pool_files()
    return sorted(rng.sample(files, min(k, len(files))))
