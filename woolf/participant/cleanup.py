"""A participant clone's disk: what `submit` removes once a PR is open, and `woolf gc --local` for the rest.

Usage:
    freed = after_submit(ledger, record, result, delta_remote=None)  # bytes removed once the PR is open
    report = clean_cache(ledger, dry_run=True)   # {"removed": [md5...], "bytes": N, "kept": [...]}
    n = reclaimable(ledger)                       # bytes `woolf gc --local` would remove

A clone grew by about three models per PR and one per version pulled (a 135M model's clone reached 6.8 GB
after two PRs): the trained weights in the work area, the copy of the optimizer state the run started
from, and in DVC's cache the delta and that optimizer state as uploaded, and every version's weights.
Once the PR is open the last three are in storage or no longer needed, so `submit` removes them (the trained
weights are overwritten by the next `train`). The DVC cache's other objects (older versions' weights, earlier
deltas), submitted trained weights and what a failed submit left in the way out are removed only by
`woolf gc --local`, and cached objects only where
the ledger's storage holds them (each is fetched again, hash-checked, if ever needed): the current version's
weights and state stay, and so does anything uploaded only to a remote of your own.
"""

from __future__ import annotations

from pathlib import Path

from woolf.errors import WoolfError
from woolf.participant.state import waiting_result, work_dir
from woolf.protocol import layout
from woolf.storage.pointer import Pointer

START = "start-optimizer.safetensors"  # participant/recipe.py's snapshot of the optimizer state a run began from


def _unlink(path: Path) -> int:
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return 0
    return size


def after_submit(ledger, record: dict, result: dict, delta_remote: str | None = None, work: bool = True) -> int:
    """Once the PR is open: the work area's optimizer snapshot (``work``: the PR sent the work area's result),
    and the cached copies of what was uploaded to the ledger's storage (the delta, the optimizer start).
    The trained weights stay until the next `train` replaces them (or `woolf gc --local`): they are one
    model, and `submit --weights` may send them again. Bytes freed."""
    freed = _unlink(work_dir(ledger) / START) if work else 0
    if delta_remote:  # uploaded to a remote of your own: the cached copy is kept (error feedback reads it)
        return freed
    opt = ((record.get("recipe") or {}).get("optimizer") or {})
    for md5 in (result.get("delta_md5"), opt.get("md5")):
        if isinstance(md5, str) and len(md5) == 32:
            freed += _unlink(ledger.store.cache_path(md5))
    return freed


def _needed(ledger) -> set[str]:
    """The cache objects this clone keeps: the checked-out main's weights and outer state."""
    keep = set()
    for rel in (layout.POINTER, layout.STATE_POINTER):
        try:
            keep.add(Pointer.parse((ledger.root / rel).read_bytes(), rel).md5)
        except (OSError, WoolfError, ValueError):
            continue
    return keep


def _cached(ledger) -> list[Path]:
    root = ledger.store.cache_path("00" * 16).parent.parent
    return sorted(p for p in root.glob("??/*") if p.is_file()) if root.is_dir() else []


def reclaimable(ledger) -> int:
    """Bytes of cached objects other than the current version's (what `woolf gc --local` looks at)."""
    keep = _needed(ledger)
    return sum(p.stat().st_size for p in _cached(ledger) if p.parent.name + p.name not in keep)


def clean_cache(ledger, dry_run: bool = False) -> dict:
    """Remove the DVC cache's objects this clone no longer needs and the ledger's storage holds, and trained
    weights already submitted."""
    keep = _needed(ledger)
    removed, kept, freed = [], [], 0
    for left in sorted((ledger.root / layout.WORK / "outgoing").glob("*.safetensors")) + \
            sorted(work_dir(ledger).glob("*.outgoing")):  # a submit that failed before its upload consumed them
        freed += left.stat().st_size if dry_run else _unlink(left)
        removed.append(str(left.relative_to(ledger.root)))
    waiting = waiting_result(ledger)
    trained = work_dir(ledger) / "trained.safetensors"
    if waiting is not None and waiting["submitted"] and trained.exists():
        freed += trained.stat().st_size if dry_run else _unlink(trained)
        removed.append(f"{layout.WORK}/work/trained.safetensors (submitted as {waiting['submitted']})")
    for path in _cached(ledger):
        md5 = path.parent.name + path.name
        if md5 in keep:
            continue
        size = path.stat().st_size
        try:
            ledger.store.verify_remote(Pointer(md5, size, "object"))
        except WoolfError:
            kept.append(md5)  # not in the ledger's storage as it is here: yours to keep
            continue
        removed.append(md5)
        freed += size
        if not dry_run:
            path.unlink()
    return {"removed": removed, "bytes": freed, "kept": kept, "dry_run": dry_run}
