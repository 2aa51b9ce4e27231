"""DVC access: track a weights file, push it, verify it in remote storage, fetch by hash.

Usage:
    store = DvcStore(ledger_root)
    ptr = store.add(path)                  # -> Pointer(md5, size, path) and the .dvc file
    store.push(ptr_file); store.verify_remote(ptr)
    local = store.fetch_object(ptr)        # cache path of a verified object
    local, tensors = store.fetch_object(ptr, read=lambda path, on_block: load_trusted(path, on_block=on_block))
                                           # loaded too; bytes not yet verified are hashed as they load
    path, loaded, pending = store.fetch_object(ptr, read=..., defer_md5=True)
                                           # the md5 in a helper thread: pending.result() admits the object
                                           # (None: nothing pending), or raises IntegrityError

Writes go through DVC's own `add` and `push`; reads of one object by hash go
through the remote's DVC filesystem, so any remote DVC supports (local
directory, S3 through dvc-s3, ...) works, and nothing needs a checkout of
the revision that names the object. DVC's repo, config and remotes are set
up in woolf/storage/dvcremote.py (DvcRemotes, which DvcStore extends).
Checkout and pull keep hash-then-copy (a link, a hashing read, a kernel copy):
a hashing user-space copy measured slower (benchmarks/RESULTS.md §1).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

from woolf.errors import IntegrityError, StorageError, WoolfError
from woolf.storage.bounded import copy_bounded
from woolf.storage.dvcremote import REMOTE_NAME, DvcRemotes, init_dvc, quiet, upload_hint  # noqa: F401 - re-exported
from woolf.storage.files import Digests, copy_atomic, hashes_of_file, md5_file
from woolf.storage.localobjects import link_from, link_into
from woolf.storage.pending import TAMPERED, Failed, PendingObject, unhashed
from woolf.storage.pointer import Pointer

log = logging.getLogger("woolf.storage")


class DvcStore(DvcRemotes):
    """Objects in, out and between the cache and DVC remotes, verified by hash (DvcRemotes: the set-up)."""

    # -- writing ---------------------------------------------------------
    def add(self, path: Path) -> Pointer:
        path = Path(path).resolve()
        try:
            with quiet():
                self.repo.add(str(path))
        except Exception as exc:
            raise StorageError(f"dvc add {path.name} failed: {exc}") from None
        return Pointer.parse(Path(str(path) + ".dvc").read_bytes(), str(path) + ".dvc")

    def put(self, path: Path, name: str, md5: str | None = None, sha256: str | None = None,
            remote: str = REMOTE_NAME) -> Pointer:
        """Move ``path`` into the DVC cache (it is consumed), upload it, verify it arrived.

        Returns the pointer to commit as ``<name>.dvc``. No workspace .dvc file is
        written, so this works for files in git-ignored areas too.
        """

        path = Path(path)
        url = self.remote_url(remote)
        if "://" not in url and not Path(url).is_dir():  # never recreate a missing (unmounted?) share
            raise StorageError(f"storage directory {url} does not exist",
                               hint="is the share mounted? a ledger's storage is made once, by `woolf init`")
        md5 = md5 or md5_file(path)
        pointer = Pointer(md5, path.stat().st_size, name)
        dest = self.cache_path(md5)
        if dest.exists() and dest.stat().st_size == pointer.size:
            path.unlink()
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o444)
            os.replace(path, dest)
            if sha256:
                self.verified.record(dest, md5, sha256)
        self.upload_cached(pointer, remote)
        return pointer

    def push(self, dvc_file: Path, pointer: Pointer) -> None:
        """Upload the object named by ``dvc_file`` and verify it arrived whole."""
        try:
            with quiet():
                self.repo.push(targets=[str(Path(dvc_file).resolve())], remote=REMOTE_NAME)
        except Exception as exc:
            raise StorageError(f"upload to {self.remote_url()} failed: {exc}", hint=upload_hint(exc)) from None
        self.verify_remote(pointer)

    def verify_remote(self, pointer: Pointer, remote: str = REMOTE_NAME) -> None:
        odb = self._remote_odb(remote)
        path = odb.oid_to_path(pointer.md5)
        try:
            info = odb.fs.info(path)
        except FileNotFoundError:
            raise StorageError(f"object {pointer.md5} is missing from storage",
                               hint=f"storage {self.remote_url(remote)}") from None
        except Exception as exc:
            raise StorageError(f"cannot reach storage {self.remote_url(remote)}: {exc}") from None
        if int(info.get("size", -1)) != pointer.size:
            raise IntegrityError(
                f"object {pointer.md5} in storage has {info.get('size')} bytes, expected {pointer.size}"
            )

    # -- reading ---------------------------------------------------------
    def fetch_object(self, pointer: Pointer, max_bytes: int | None = None, deadline: float | None = None,
                     read=None, defer_md5: bool = False):
        """The cache path of ``pointer``'s object, downloaded if needed, md5-verified.

        Storage is as untrusted as a PR: only a regular file whose size is the
        pointer's is read, never more than that many bytes, within ``deadline`` seconds.

        ``read(path, on_block)``: the object is also loaded, and (path, what ``read`` returned)
        comes back. Bytes not yet hashed are hashed as ``read`` loads them (``on_block`` gets
        every byte of the file, in order; None when nothing needs hashing): one pass over them.
        An object that fails its hash raises IntegrityError before anything loaded is returned;
        an error of ``read`` itself is raised after the object is hashed (and cached if whole).

        ``defer_md5`` (with ``read``): an object linked from storage on this filesystem is
        loaded by ``read``; its md5 and sha256 then run in helper threads of their own, each from its
        own read of the same inode (``on_block`` does nothing), from ``pending.start()`` on (the caller
        chooses when: the validator once its merge is made) or ``pending.result()``; (path, loaded,
        PendingObject) comes back,
        ``path`` the not yet admitted file (read it through a descriptor opened now). The caller must
        call ``pending.result()`` (IntegrityError: the object is not the pointer's; else
        ``pending.sha256`` is set) and compare the sha256 before anything it decides from the bytes
        takes effect. Every other case hashes in line: (path, loaded, None). An error of ``read``
        is raised once the hashes are known (an IntegrityError first).
        """
        if max_bytes is not None and pointer.size > max_bytes:
            raise IntegrityError(f"object {pointer.md5} is {pointer.size} bytes, over {max_bytes}")
        dest = self.cache_path(pointer.md5)
        if dest.exists() and dest.stat().st_size == pointer.size:
            if read is None:
                return dest
            if self.verified.lookup(dest):
                return (dest, read(dest, None)) + ((None,) if defer_md5 else ())
            digests = Digests()
            loaded = self._read_hashing(read, dest, digests)
            self.verified.record(dest, *digests.hexdigests())  # the caller compares them with the record
            if isinstance(loaded, Failed):
                loaded.throw()
            return (dest, loaded) + ((None,) if defer_md5 else ())
        if defer_md5 and read is not None:
            return self._fetch_deferred(pointer, read, max_bytes, deadline)
        odb = self._remote_odb()
        src = odb.oid_to_path(pointer.md5)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".fetch.")
        os.close(fd)
        loaded = None
        try:
            digests = Digests()
            if link_from(odb, src, Path(tmp), pointer):  # same filesystem: no copy, hashed as it is read
                if read is not None:
                    loaded = self._read_hashing(read, Path(tmp), digests)
                    self.admit(Path(tmp), pointer, TAMPERED, digests.hexdigests())
                else:
                    self.admit(Path(tmp), pointer, TAMPERED)
            else:  # any other storage: one streamed read, hashed on the way
                copy_bounded(odb.fs, src, Path(tmp), pointer, deadline, where=self.remote_url(),
                             on_block=digests.update)
                self.admit(Path(tmp), pointer, TAMPERED, digests.hexdigests())
                if read is not None:
                    loaded = read(dest, None)
        finally:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(loaded, Failed):
            loaded.throw()
        return dest if read is None else (dest, loaded)

    def _fetch_deferred(self, pointer: Pointer, read, max_bytes, deadline):
        """fetch_object(defer_md5=True) of an object not in the cache (see there)."""
        dest = self.cache_path(pointer.md5)
        odb = self._remote_odb()
        src = odb.oid_to_path(pointer.md5)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=".fetch.")
        os.close(fd)
        tmp = Path(name)
        try:
            linked = link_from(odb, src, tmp, pointer)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if not linked:  # another filesystem or remote: copied and hashed in line
            tmp.unlink(missing_ok=True)
            return (*self.fetch_object(pointer, max_bytes, deadline, read), None)
        pending = PendingObject(self, tmp, pointer)  # md5 and sha256 from their own reads, after this one
        try:
            loaded = read(tmp, unhashed)
        except WoolfError as exc:  # not what the reader expects: hashed and admitted (or not) first
            pending.result()
            raise exc from None
        except BaseException:
            with contextlib.suppress(IntegrityError):
                pending.result()  # the helper threads done, the file gone
            raise
        return tmp, loaded, pending

    @staticmethod
    def _read_hashing(read, path: Path, digests: Digests):
        """``read`` with every byte hashed; if it fails part way, the rest of the file is hashed alone."""
        try:
            return read(path, digests.update)
        except WoolfError as exc:
            digests.hexdigests()  # the helper thread is done with the partial pass
            digests.__init__(md5=digests.md5 is not None)
            with open(path, "rb") as fh:
                while block := fh.read(16 << 20):
                    digests.update(block)
            return Failed(exc)

    def ensure_remote(self, pointer: Pointer, remote: str = REMOTE_NAME) -> None:
        """``pointer``'s object is in storage, whole; if not, uploaded again from this clone's verified cache."""
        try:
            self.verify_remote(pointer, remote)
            return
        except StorageError as exc:
            if "missing" not in exc.message:
                raise
        except IntegrityError:
            pass
        cached = self.cache_path(pointer.md5)
        if not (cached.is_file() and cached.stat().st_size == pointer.size and self.hashes(cached)[0] == pointer.md5):
            raise StorageError(f"object {pointer.md5} is missing from storage and this clone has no copy",
                               hint="whoever holds the original must upload it again")
        log.warning("object %s was missing from %s; uploaded again from the cache", pointer.md5,
                    self.remote_url(remote))
        self.upload_cached(pointer, remote, replace=True)

    def adopt(self, tmp: Path, pointer: Pointer, md5: str, sha256: str) -> None:
        """A file this process wrote and hashed (a rebuilt version) becomes ``pointer``'s cache object."""
        if tmp.stat().st_size != pointer.size or md5 != pointer.md5:
            raise IntegrityError(f"object {pointer.md5}: the rebuilt bytes do not match the pointer")
        dest = self.cache_path(pointer.md5)
        os.chmod(tmp, 0o444)
        os.replace(tmp, dest)
        self.verified.record(dest, md5, sha256)

    def remove(self, pointer: Pointer, remote: str = REMOTE_NAME) -> None:
        """Delete ``pointer``'s object from storage and this clone's cache (`woolf gc`; never for a participant)."""
        odb = self._remote_odb(remote)
        try:
            odb.fs.rm(odb.oid_to_path(pointer.md5))
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise StorageError(f"cannot delete {pointer.md5} from {self.remote_url(remote)}: {exc}",
                               hint="gc needs write and delete access to the storage") from None
        self.cache_path(pointer.md5).unlink(missing_ok=True)

    def admit(self, tmp: Path, pointer: Pointer, problem: str, digests: tuple[str, str] | None = None) -> None:
        """Hash a downloaded file (or take the hashes made on the way); if it is the object, cache it read-only."""
        md5, sha = digests or hashes_of_file(tmp)
        if tmp.stat().st_size != pointer.size or md5 != pointer.md5:
            raise IntegrityError(f"object {pointer.md5} {problem}",
                                 hint="the object must be re-uploaded by whoever holds the original")
        dest = self.cache_path(pointer.md5)
        os.chmod(tmp, 0o444)
        os.replace(tmp, dest)
        self.verified.record(dest, md5, sha)

    def fetch_url(self, pointer: Pointer, url: str, forge_cfg, max_bytes: int) -> Path:
        """A delta from a contributor's own storage, downloaded with limits and md5-verified into the cache."""
        from woolf.storage.fetch_url import download  # deferred: loads requests

        dest = self.cache_path(pointer.md5)
        if dest.exists() and dest.stat().st_size == pointer.size:
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".url.")
        os.close(fd)
        try:
            download(url, Path(tmp), set(forge_cfg.delta_schemes), min(max_bytes, pointer.size),
                     forge_cfg.delta_timeout)
            self.admit(Path(tmp), pointer, "downloaded from its URL does not match its md5")
        finally:
            Path(tmp).unlink(missing_ok=True)
        return dest

    def upload_cached(self, pointer: Pointer, remote: str = REMOTE_NAME, replace: bool = False) -> None:
        """Upload an object already in the cache to a DVC remote through DVC's ODB, and verify it."""
        from dvc_objects.fs.local import LocalFileSystem  # deferred: dvc

        odb = self._remote_odb(remote)
        if link_into(odb, self.cache_path(pointer.md5), pointer, replace):
            self.verify_remote(pointer, remote)
            return
        odb = self._dvc_odb(remote)  # DVC copies (and makes read-only) what cannot be linked
        try:
            with quiet():
                odb.add(str(self.cache_path(pointer.md5)), LocalFileSystem(), pointer.md5,
                        check_exists=not replace)
        except Exception as exc:  # any DVC or transport failure is a storage error
            raise StorageError(f"upload to {self.remote_url(remote)} failed: {exc}",
                               hint=upload_hint(exc)) from None
        self.verify_remote(pointer, remote)

    def materialize(self, pointer: Pointer, out: Path) -> None:
        """Copy the cached object to ``out`` by temp file + rename (never a link to the cache)."""
        copy_atomic(self.fetch_object(pointer), out)
