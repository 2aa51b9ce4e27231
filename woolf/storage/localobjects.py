"""A local-directory DVC remote reached directly, and read-only hard links between it and the cache.

Usage (by woolf/storage/dvcstore.py):
    odb = LocalObjects(Path(url) / "files" / "md5")     # DVC's layout: files/md5/<2>/<30>
    linked = link_from(odb, odb.oid_to_path(md5), tmp, pointer)     # storage -> cache tmp, or False
    linked = link_into(odb, cache_object, pointer, replace=False)   # cache -> storage, or False

No DVC repo is opened for a local directory (0.5-1.4 s per process). Links are
made only for regular files this user owns, read-only (files.link_readonly);
whatever cannot be linked is copied by the caller (streamed and hashed on the
way, or through DVC's object database).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from woolf.storage.files import link_readonly
from woolf.storage.pointer import Pointer


class LocalFs:
    """The part of DVC's local filesystem the store uses on a local storage directory."""

    protocol = "local"

    @staticmethod
    def info(path: str) -> dict:
        st = os.stat(path)
        return {"size": st.st_size, "type": "file" if stat.S_ISREG(st.st_mode) else "other"}

    @staticmethod
    def exists(path: str) -> bool:
        return os.path.lexists(path)

    @staticmethod
    def rm(path: str) -> None:
        os.unlink(path)


class LocalObjects:
    """A local DVC remote's objects at ``files/md5/<2>/<30>``, reached without opening the DVC repo."""

    fs = LocalFs()

    def __init__(self, path: Path):
        self.path = str(path)

    def oid_to_path(self, oid: str) -> str:
        return os.path.join(self.path, oid[:2], oid[2:])


def _local_path(odb, oid_path: str) -> Path | None:
    """The object's path when the remote is a local directory."""
    return Path(oid_path) if getattr(odb.fs, "protocol", None) == "local" else None


def link_from(odb, src: str, tmp: Path, pointer: Pointer) -> bool:
    """A local storage object of the pointer's size hard-linked at ``tmp`` (read-only); False: copy it."""
    path = _local_path(odb, src)
    if path is None:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False  # the copy path reports what is wrong
    if not stat.S_ISREG(st.st_mode) or st.st_size != pointer.size:
        return False
    tmp.unlink(missing_ok=True)
    if link_readonly(path, tmp) and tmp.stat().st_size == pointer.size:
        return True
    tmp.unlink(missing_ok=True)
    tmp.touch()
    return False


def link_into(odb, cached: Path, pointer: Pointer, replace: bool) -> bool:
    """A local storage on the cache's filesystem gets a read-only hard link of the cache object."""
    dest = _local_path(odb, odb.oid_to_path(pointer.md5))
    if dest is None or not Path(odb.path).is_dir():  # never recreate a missing (unmounted?) share
        return False
    if not replace and dest.is_file() and dest.stat().st_size == pointer.size:
        return True  # as DVC's check_exists: already there
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".link.{os.getpid()}.{dest.name}"
    tmp.unlink(missing_ok=True)
    if not link_readonly(cached, tmp):
        return False
    os.replace(tmp, dest)
    return True
