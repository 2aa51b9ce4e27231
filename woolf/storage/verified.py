"""Remember which cache objects were hashed, keyed by inode, size and mtime (as DVC's state db).

Usage:
    vh = VerifiedHashes(root / ".woolf" / "verified")
    md5, sha = vh.hashes(path)          # computed once, then served while the file is unchanged

Cache objects are read-only and content-addressed; any write to one changes its
mtime or size, so a stale record is never served and the bytes are hashed again.
"""

from __future__ import annotations

import os
from pathlib import Path

from woolf.storage.files import hashes_of_file, write_bytes_atomic


class VerifiedHashes:
    def __init__(self, directory: Path):
        self.dir = Path(directory)

    @staticmethod
    def _key(path: Path) -> str:
        st = os.stat(path)
        return f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"

    def lookup(self, path: Path) -> tuple[str, str] | None:
        record = self._record_path(path)
        try:
            key, md5, sha = record.read_text().split("\n")[:3]
        except (OSError, ValueError):
            return None
        return (md5, sha) if key == self._key(path) else None

    def record(self, path: Path, md5: str, sha: str) -> None:
        write_bytes_atomic(f"{self._key(path)}\n{md5}\n{sha}\n".encode(), self._record_path(path))

    def _record_path(self, path: Path) -> Path:
        p = Path(path)
        return self.dir / f"{p.parent.name}{p.name}"

    def hashes(self, path: Path) -> tuple[str, str]:
        found = self.lookup(path)
        if found:
            return found
        md5, sha = hashes_of_file(path)
        self.record(path, md5, sha)
        return md5, sha
