"""What a merge version needs to be recomputed: its delta object and declared kind; which versions gc may drop.

Usage:
    path, declared = merged_delta(ledger, version)    # cache path (md5-verified) and submission.json's delta
    gc_removable(ledger, version, head_version)       # not a snapshot (every storage.snapshot_every) nor the newest
"""

from __future__ import annotations

from pathlib import Path

from woolf import layout
from woolf.admission import META_MAX_BYTES, META_MAX_DEPTH
from woolf.errors import IntegrityError
from woolf.storage.pointer import MAX_BYTES as POINTER_MAX_BYTES
from woolf.storage.pointer import Pointer
from woolf.storage.safejson import loads_untrusted


def is_snapshot(version: int, every: int) -> bool:
    return version % every == 0


def gc_removable(ledger, version, head: int) -> bool:
    return version.version != head and not is_snapshot(version.version, ledger.config.storage.snapshot_every)


def delta_pointer(ledger, version) -> tuple[Pointer, dict]:
    """The merged submission's delta pointer and its declared delta (kind and parameters)."""
    if version.submission is None or len(version.parents) != 2:
        raise IntegrityError(f"version {version.version} is not a merge of a submission")
    _, ptr_rel, meta_rel = layout.submission_paths(version.submission)
    head = version.parents[1]
    raw = ledger.git.show_bytes(f"{head}:{meta_rel}", max_bytes=META_MAX_BYTES)
    try:
        declared = loads_untrusted(raw or b"", META_MAX_BYTES, META_MAX_DEPTH)["delta"]
        if not isinstance(declared, dict):
            raise TypeError("delta is not an object")
    except (ValueError, TypeError, KeyError) as exc:
        raise IntegrityError(f"version {version.version}: the merged submission.json is unreadable ({exc})") from None
    raw = ledger.git.show_bytes(f"{head}:{ptr_rel}", max_bytes=POINTER_MAX_BYTES)
    return Pointer.parse(raw or b"", ptr_rel), declared


def merged_delta(ledger, version) -> tuple[Path, dict]:
    pointer, declared = delta_pointer(ledger, version)
    return ledger.store.fetch_object(pointer), declared
