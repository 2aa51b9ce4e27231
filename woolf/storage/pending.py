"""An object fetched from storage whose hashes are still being computed, and a reader's error kept until
its object is hashed: what DvcStore.fetch_object hands back beside what it loaded.

Usage (woolf/storage/dvcstore.py makes them; the validator settles them: validator/delta_load.py):
    pending = PendingObject(store, tmp, pointer)   # md5 and sha256 in helper threads, each from its own read
    pending.start()                                # (result() starts them too)
    pending.result()                               # admitted to the cache, or IntegrityError (file removed)
    failed = Failed(exc); failed.throw()           # a reader's error, raised once its object was hashed
"""

from __future__ import annotations

from pathlib import Path

from woolf.errors import IntegrityError
from woolf.storage.files import HashJob
from woolf.storage.pointer import Pointer

TAMPERED = "in storage does not match its hash (corrupted or tampered)"


def unhashed(block) -> None:
    """``read``'s on_block when the object is hashed by helper threads of their own (PendingObject)."""


class Failed:
    """What a reader raised, kept until the object it read is hashed (and admitted, if whole)."""

    def __init__(self, exc: Exception):
        self.exc = exc

    def throw(self):
        """Raise it, keeping no reference: a traceback held by a caller's local forms a cycle that keeps
        every calling frame's tensors (the validator's current weights) alive until the cyclic GC runs."""
        exc, self.exc = self.exc, None
        try:
            raise exc
        finally:
            del exc


class PendingObject:
    """An object linked from storage and being hashed (md5 and sha256) in helper threads of their own
    (``fetch_object(defer_md5=True)``): nothing of it is in the cache, nor recorded verified, until
    ``result()`` finds the md5 the pointer's; then it is admitted and ``sha256`` is set. ``result()``
    raises IntegrityError when it is not (every later call raises it again) and always removes the
    unadmitted file."""

    def __init__(self, store, tmp: Path, pointer: Pointer):
        self.store, self.tmp, self.pointer = store, tmp, pointer
        self.sha256: str | None = None  # known once result() returned
        self._jobs: list = []
        self._outcome: IntegrityError | bool | None = None
        try:
            self._jobs = [HashJob(tmp, "md5", start=False), HashJob(tmp, "sha256", start=False)]
        except BaseException:
            self._drop()
            raise

    def start(self) -> None:
        """Begin hashing (``result`` starts it too): the file is pinned (opened) from the start."""
        for job in self._jobs:
            job.start()

    def _drop(self) -> None:
        for job in self._jobs:
            job.close()
        self.tmp.unlink(missing_ok=True)

    def result(self) -> None:
        if self._outcome is None:
            try:
                md5, sha = (job.result() for job in self._jobs)
                self.store.admit(self.tmp, self.pointer, TAMPERED, (md5, sha))
                self.sha256, self._outcome = sha, True
            except IntegrityError as exc:
                self._outcome = exc
            except OSError as exc:
                self._outcome = IntegrityError(f"object {self.pointer.md5} could not be read back: {exc}")
            finally:
                self._drop()
        if self._outcome is not True:
            raise IntegrityError(self._outcome.message, hint=self._outcome.hint)
