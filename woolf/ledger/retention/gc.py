"""What storage holds, by kind, and `woolf gc`: drop the full weights of versions that are not snapshots.

Usage:
    report = survey(ledger)             # {"snapshots": {...}, "deltas": {...}, "reclaimable": {...}, ...}
                                        # "tampered": objects whose stored bytes are not theirs (named)
    done = collect(ledger, dry_run=True)  # what gc would remove (dry_run=False removes it)

A ledger keeps full weights for every ``storage.snapshot_every``-th version
(version 0 included) and for the newest; every other version is rebuilt bit
for bit from the nearest snapshot and the merged deltas (woolf/ledger/retention/rebuild.py).
gc never removes an object that a snapshot, the newest version, a delta or an
outer state also names (objects are content-addressed: a change version shares
its parent's weights). It reads origin's main when there is an origin. Only a
holder of storage's delete permission (a maintainer or validator) can run it.
"""

from __future__ import annotations

from woolf.errors import WoolfError
from woolf.ledger.retention.deltas import (
    delta_pointer,
    delta_pointers,
    is_snapshot,
    weights_pointers,
)
from woolf.protocol import layout
from woolf.storage.pointer import Pointer


def _holds(check, ptr) -> bool:
    """True when ``check(ptr)`` (a store method that raises a WoolfError on failure) succeeds."""
    try:
        check(ptr)
        return True
    except WoolfError:
        return False


def _intact(ledger, ptr) -> bool:
    """Its bytes hash to its md5 (downloaded and checked): False for a file planted at its path."""
    return _holds(ledger.store.fetch_object, ptr)


def _present(ledger, ptr) -> bool:
    return _holds(ledger.store.verify_remote, ptr)


def _objects(ledger):
    """({md5: (kind, size)} of what must stay, [(version, pointer)] of gc candidates, head)."""
    if ledger.has_origin():
        ledger.fetch(prs=False)
        ledger.main_ref = "refs/remotes/origin/main"
        ledger.reread_config()
    versions = ledger.log()
    every = ledger.config.storage.snapshot_every
    head = versions[0].version if versions else 0
    keep: dict[str, tuple[str, int]] = {}
    candidates = []
    for v, ptr in zip(versions, weights_pointers(ledger, versions), strict=True):
        if v.version == head or is_snapshot(v.version, every):
            keep[ptr.md5] = ("snapshots", ptr.size)
        else:
            candidates.append((v.version, ptr))
        if ledger.git.show_bytes(f"{v.commit}:{layout.STATE_POINTER}") is not None:
            sp = ledger.pointer(v.commit, layout.STATE_POINTER)
            keep.setdefault(sp.md5, ("states", sp.size))
    merges = [v for v in versions if v.submission is not None and len(v.parents) == 2]
    try:
        found = delta_pointers(ledger, merges)
    except WoolfError:  # one at a time: a bad one is `woolf audit`'s to report
        found = {}
        for v in merges:
            try:
                found[v.version] = delta_pointer(ledger, v)
            except WoolfError:
                pass
    for dp, _ in found.values():
        keep.setdefault(dp.md5, ("deltas", dp.size))
    return keep, [(n, p) for n, p in candidates if p.md5 not in keep], head, len(versions), every


def survey(ledger) -> dict:
    keep, candidates, head, count, every = _objects(ledger)
    out = {k: {"count": 0, "bytes": 0} for k in ("snapshots", "deltas", "states", "reclaimable", "removed",
                                                  "missing", "tampered")}
    out["tampered"]["objects"] = []  # md5s whose stored bytes are not theirs: never trusted, rebuilt around
    for md5, (kind, size) in keep.items():
        where = kind if _present(ledger, Pointer(md5, size, kind)) else "missing"
        out[where]["count"] += 1
        out[where]["bytes"] += size
    seen = set()
    for _, ptr in candidates:
        if ptr.md5 in seen:
            continue
        seen.add(ptr.md5)
        where = "reclaimable" if _present(ledger, ptr) else "removed"
        if where == "reclaimable" and not _intact(ledger, ptr):  # e.g. planted after gc removed it
            where = "tampered"
            out[where]["objects"].append(ptr.md5)
        out[where]["count"] += 1
        out[where]["bytes"] += ptr.size
    stored = sum(out[k]["bytes"] for k in ("snapshots", "deltas", "states", "reclaimable"))
    return {"versions": count, "head": head, "snapshot_every": every, **out, "stored_bytes": stored,
            "after_gc_bytes": stored - out["reclaimable"]["bytes"]}


def collect(ledger, dry_run: bool = False) -> dict:
    _, candidates, head, _, every = _objects(ledger)
    removed, seen, total = [], set(), 0
    for number, ptr in sorted(candidates, key=lambda c: c[0]):
        if ptr.md5 in seen or not _present(ledger, ptr):
            continue
        seen.add(ptr.md5)
        if not dry_run:
            ledger.store.remove(ptr)
        removed.append({"version": number, "md5": ptr.md5, "bytes": ptr.size})
        total += ptr.size
    return {"dry_run": dry_run, "head": head, "snapshot_every": every, "removed": removed, "bytes": total}
