"""Reads of storage objects as untrusted bytes: regular files only, at most the declared size, a deadline.

Usage:
    copy_bounded(odb.fs, odb.oid_to_path(md5), Path(tmp), pointer, deadline=300, where=remote_url)

Anyone who can write to storage can put a FIFO (the reader hangs), a link to
`/dev/zero` (it never ends), a sparse 1 TB file or a 2 GiB object behind a
pointer that declares 1,000 bytes. Each is refused before more than the
pointer's size is read, with a message that says what is wrong.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from pathlib import Path

from woolf.errors import IntegrityError, StorageError, WoolfError
from woolf.storage.pointer import Pointer

log = logging.getLogger("woolf.storage")


def _wrong(pointer: Pointer, what: str) -> IntegrityError:
    return IntegrityError(f"object {pointer.md5} in storage {what}",
                          hint="the object must be re-uploaded by whoever holds the original")


def open_object(fs, src: str, pointer: Pointer, where: str):
    """A read handle on a storage object that is a regular file of the pointer's size."""
    try:
        if fs.protocol == "local":  # opened without following a link, and never blocking on a FIFO
            fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != pointer.size:
                os.close(fd)
                raise _wrong(pointer, "is not a regular file" if not stat.S_ISREG(st.st_mode) else
                             f"has {st.st_size} bytes, its pointer declares {pointer.size}")
            return os.fdopen(fd, "rb")
        info = fs.info(src)
        if info.get("type", "file") != "file" or int(info.get("size", -1)) != pointer.size:
            raise _wrong(pointer, f"has {info.get('size')} bytes, its pointer declares {pointer.size}")
        return fs.open(src, "rb")
    except FileNotFoundError:
        raise StorageError(f"object {pointer.md5} is missing from storage",
                           hint=f"storage {where}: the uploader did not finish, or storage lost it") from None
    except WoolfError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _wrong(pointer, "is a symbolic link, not a file") from None
        log.warning("reading %s from %s failed: %s", pointer.md5, where, exc)
        raise StorageError(f"cannot read object {pointer.md5} from storage",
                           hint=f"is {where} reachable? ({exc})") from None
    except Exception as exc:  # any transport or credential error of a DVC filesystem
        log.warning("reading %s from %s failed: %s", pointer.md5, where, exc)
        raise StorageError(f"cannot read object {pointer.md5} from storage",
                           hint=f"is {where} reachable? ({exc})") from None


def copy_bounded(fs, src: str, dest: Path, pointer: Pointer, deadline: float | None, where: str,
                 on_block=None) -> None:
    """Copy at most ``pointer.size`` + 1 bytes of ``src`` to ``dest``; refuse any other size or a late read.

    ``on_block(bytes)`` sees every block written (hashing on the way: no re-read).
    """
    start = time.monotonic()
    written = 0
    with open_object(fs, src, pointer, where) as fh, open(dest, "wb") as out:
        while written <= pointer.size:
            block = fh.read(min(pointer.size + 1 - written, 8 << 20))
            if not block:
                break
            if on_block is not None:
                on_block(block)
            out.write(block)
            written += len(block)
            if deadline is not None and time.monotonic() - start > deadline:
                raise IntegrityError(f"object {pointer.md5}: reading it from storage took longer than {deadline:g}s")
    if written > pointer.size:
        raise _wrong(pointer, f"has more bytes than its pointer declares ({pointer.size})")
    if written < pointer.size:
        raise _wrong(pointer, f"has {written} bytes, its pointer declares {pointer.size}")
