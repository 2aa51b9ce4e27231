"""What a merge version needs to be recomputed: its delta object and declared kind; which versions gc may drop.

Usage:
    path, declared = merged_delta(ledger, version)    # cache path (md5-verified) and submission.json's delta
    gc_removable(ledger, version, head_version)       # not a snapshot (every storage.snapshot_every) nor the newest
"""

from __future__ import annotations

from pathlib import Path

from woolf.errors import IntegrityError
from woolf.protocol import layout
from woolf.protocol.layout import META_MAX_BYTES, META_MAX_DEPTH
from woolf.protocol.safejson import loads_untrusted
from woolf.storage.pointer import MAX_BYTES as POINTER_MAX_BYTES
from woolf.storage.pointer import Pointer


def is_snapshot(version: int, every: int) -> bool:
    return version % every == 0


def gc_removable(ledger, version, head: int) -> bool:
    return version.version != head and not is_snapshot(version.version, ledger.config.storage.snapshot_every)


def _specs(version) -> tuple[str, str]:
    if version.submission is None or len(version.parents) != 2 or "\n" in version.submission:
        raise IntegrityError(f"version {version.version} is not a merge of a submission")
    _, ptr_rel, meta_rel = layout.submission_paths(version.submission)
    return f"{version.parents[1]}:{meta_rel}", f"{version.parents[1]}:{ptr_rel}"


def _parse(version, meta: bytes | None, ptr: bytes | None) -> tuple[Pointer, dict]:
    try:
        declared = loads_untrusted(meta or b"", META_MAX_BYTES, META_MAX_DEPTH)["delta"]
        if not isinstance(declared, dict):
            raise TypeError("delta is not an object")
    except (ValueError, TypeError, KeyError) as exc:
        raise IntegrityError(f"version {version.version}: the merged submission.json is unreadable ({exc})") from None
    return Pointer.parse(ptr or b"", _specs(version)[1].split(":", 1)[1]), declared


def delta_pointer(ledger, version) -> tuple[Pointer, dict]:
    """The merged submission's delta pointer and its declared delta (kind and parameters)."""
    meta_spec, ptr_spec = _specs(version)
    return _parse(version, ledger.git.show_bytes(meta_spec, max_bytes=META_MAX_BYTES),
                  ledger.git.show_bytes(ptr_spec, max_bytes=POINTER_MAX_BYTES))


def read_blobs(git, specs: list[str]) -> list[bytes]:
    """Many small blobs in two git calls: every size checked (``.json`` 64 KiB, others 4 KiB) before any is read."""
    if not specs:
        return []
    if any("\n" in s for s in specs):
        raise IntegrityError("a path with a newline")
    stdin = "".join(f"{s}\n" for s in specs).encode()
    sizes = git.run("cat-file", "--batch-check", input=stdin).stdout.decode(errors="replace").splitlines()
    if len(sizes) != len(specs):
        raise IntegrityError("git could not list the ledger's files")
    for spec, line in zip(specs, sizes, strict=True):
        parts = line.split()
        limit = META_MAX_BYTES if spec.endswith(".json") else POINTER_MAX_BYTES
        if len(parts) != 3 or parts[1] != "blob" or not parts[2].isdigit() or int(parts[2]) > limit:
            raise IntegrityError(f"{spec[:120]} is missing, not a file, or too large")
    blobs, pos = [], 0
    raw = git.run("cat-file", "--batch", input=stdin).stdout
    for _ in specs:
        end = raw.index(b"\n", pos)
        size = int(raw[pos:end].split()[2])
        blobs.append(raw[end + 1:end + 1 + size])
        pos = end + 1 + size + 1
    return blobs


def weights_pointers(ledger, versions) -> list[Pointer]:
    """Each version's weights pointer, in two git calls."""
    raws = read_blobs(ledger.git, [f"{v.commit}:{layout.POINTER}" for v in versions])
    return [Pointer.parse(raw, f"{v.commit[:12]}:{layout.POINTER}") for v, raw in zip(versions, raws, strict=True)]


def delta_pointers(ledger, versions) -> dict[int, tuple[Pointer, dict]]:
    """delta_pointer of many merge versions in two git calls (sizes checked first, then the blobs)."""
    blobs = read_blobs(ledger.git, [s for v in versions for s in _specs(v)])
    return {v.version: _parse(v, blobs[2 * i], blobs[2 * i + 1]) for i, v in enumerate(versions)}


def merged_delta(ledger, version) -> tuple[Path, dict]:
    pointer, declared = delta_pointer(ledger, version)
    return ledger.store.fetch_object(pointer), declared
