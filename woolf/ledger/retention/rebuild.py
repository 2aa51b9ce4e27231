"""Rebuild a version whose full weights are not in storage, bit for bit, from the nearest stored one.

Usage:
    path, info = rebuild(ledger, version)   # cache path of the rebuilt weights; info: {"from": S, "deltas": n}

Walks main's first-parent chain down from the version to the nearest version
whose weights are in this clone's cache or in storage (a snapshot, normally:
`woolf gc` keeps every ``storage.snapshot_every``-th), then replays every merge
above it exactly as the validator made it and the audit recomputes it: the
merged delta (expanded if compressed), the rule and parameters the version
recorded, and the parent's outer state for a rule that keeps one. A delta
whose kind has a sparse form (topk: storage/kinds/ ``sparse_entries``) merged under
`attenuated` touches only its kept values (``apply_sparse_``: the same bytes, in a
fraction of the time). The result
must hash to the version's recorded sha256 and its pointer's md5, or nothing
is kept; it then becomes the cache object, so every later read is a copy. A dense
delta is read tensor by tensor and the attenuated merge writes into the weights' own
memory (ledger/transition.py); the file is written and hashed from that memory: one model in
memory, not three.
Every object read is verified (md5 as it is fetched, sha256 against the record):
one that storage holds with other bytes (a file planted at a removed version's
path) is named in ``info["tampered"]``, never trusted, and the walk falls back to
an older snapshot.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from woolf.core.compress import apply_sparse_
from woolf.core.scale import delta_scale
from woolf.errors import IntegrityError, StorageError, WoolfError
from woolf.ledger.retention.deltas import delta_pointers, weights_pointers
from woolf.ledger.transition import open_delta, parent_state, recorded_rule, transition
from woolf.storage.kinds import kind_for
from woolf.storage.weights import TRUSTED_LIMITS, spec_of
from woolf.storage.writer import write_hashed

MAX_CHAIN = 100_000


def _stored(ledger, ptr) -> bool:
    cached = ledger.store.cache_path(ptr.md5)
    if cached.is_file() and cached.stat().st_size == ptr.size:
        return True
    try:
        ledger.store.verify_remote(ptr)
        return True
    except WoolfError:
        return False


def _verified_start(ledger, chain, ptrs, tampered: list) -> int | None:
    """The nearest version below the target whose stored weights are its own bytes (md5 by the fetch,
    sha256 against the version's record): a planted object at a removed version's path is named in
    ``tampered`` and passed over, never trusted, and the walk goes on down to an older snapshot."""
    for i in range(1, len(chain)):
        if not _stored(ledger, ptrs[i]):
            continue
        try:
            path = ledger.store.fetch_object(ptrs[i])
            sha = ledger.store.hashes(path)[1]
        except IntegrityError as exc:
            tampered.append({"version": chain[i].version, "md5": ptrs[i].md5, "why": exc.message})
            continue
        except StorageError:
            continue
        if chain[i].weights_sha256 not in (None, sha):
            path.unlink(missing_ok=True)
            tampered.append({"version": chain[i].version, "md5": ptrs[i].md5, "why": "sha256 differs from its record"})
            continue
        return i
    return None


def rebuild(ledger, target) -> tuple[Path, dict]:
    chain = ledger.log(ref=target.commit, limit=MAX_CHAIN)  # newest first: target, its parent, ...
    ptrs = weights_pointers(ledger, chain)
    tampered: list = []
    start = _verified_start(ledger, chain, ptrs, tampered)
    if start is None:
        raise StorageError(f"version {target.version} is not in storage, and no version below it is"
                           + (f" intact ({len(tampered)} tampered object(s))" if tampered else ""),
                           hint="restore a snapshot's weights to storage; run `woolf audit`")
    weights = ledger.load_weights(chain[start])  # sha256-verified, hashed as it loads
    spec = spec_of(weights)
    pointers = delta_pointers(ledger, [v for v in chain[:start] if v.submission is not None])
    replayed, stale = 0, {}  # stale: where the last sparse merge of each tensor wrote -0.0 (absent: anywhere)
    for i in range(start - 1, -1, -1):
        v, prev = chain[i], chain[i + 1]
        if v.submission is None:  # a change version keeps its parent's weights
            continue
        label = f"delta of version {v.version}"
        try:
            pointer, declared = pointers[v.version]
            path = ledger.store.fetch_object(pointer)
            if ledger.store.hashes(path)[1] != declared.get("sha256"):  # the bytes the validator checked
                raise IntegrityError(f"{label}: its bytes are not the merged submission's sha256",
                                     hint="run `woolf audit`")
            rule, kind = recorded_rule(v), kind_for(declared, label)
            merged = None  # the kept values alone, when the delta's kind has a sparse form
            if rule.kind == "attenuated" and v.delta_clip is None:
                merged = kind.sparse_entries(path, declared, spec, TRUSTED_LIMITS, label, check=False)
            if merged is not None:
                # the same bytes as merge_step on the expanded delta, touching only the kept values
                scale = delta_scale(rule.alpha, v.attenuation or 0.0)
                for name, (where, vals) in merged.items():
                    stale[name] = apply_sparse_(weights[name], where, vals, scale, stale.get(name))
            else:
                delta = open_delta(path, declared, spec, TRUSTED_LIMITS, label)  # dense: tensor by tensor
                state = parent_state(ledger, prev, spec)
                weights = transition(rule, weights, state, delta, v.attenuation or 0.0,  # in place, clipped
                                     clip=v.delta_clip).candidate  # as the validator clipped it
                stale = {}
        except (ValueError, KeyError, RuntimeError, TypeError, IndexError) as exc:
            raise IntegrityError(f"version {v.version} cannot be replayed: {exc}", hint="run `woolf audit`") from None
        replayed += 1

    ptr = ledger.pointer(target.commit)
    dest = ledger.store.cache_path(ptr.md5)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".rebuild.")
    os.close(fd)
    try:  # safetensors' bytes written from the weights' memory, md5 and sha256 on the way (no copy in memory)
        md5, sha = write_hashed(weights, Path(tmp))
        del weights
        if sha != target.weights_sha256:
            raise IntegrityError(f"version {target.version} rebuilt from version {chain[start].version} does not "
                                 "match its recorded sha256", hint="run `woolf audit`")
        ledger.store.adopt(Path(tmp), ptr, md5, sha)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest, {"version": target.version, "from": chain[start].version, "deltas": replayed,
                  **({"tampered": tampered} if tampered else {})}


def rebuild_missing(ledger, version, missing: StorageError | IntegrityError) -> Path:
    """The cache path of a version that storage no longer keeps (`woolf gc`), or keeps as other bytes (a
    file planted at its path after gc: named in ledger.last_rebuild["tampered"], never trusted), rebuilt
    from a snapshot and the deltas, bit for bit; any other storage failure is raised as it was."""
    planted = isinstance(missing, IntegrityError)
    if (not planted and "missing from storage" not in missing.message) or version.version == 0:
        raise missing
    try:
        path, ledger.last_rebuild = rebuild(ledger, version)
    except StorageError as again:
        raise StorageError(f"{missing.message}; {again.message}", hint=again.hint) from None
    if planted:
        ptr = ledger.pointer(version.commit)
        ledger.last_rebuild.setdefault("tampered", []).insert(
            0, {"version": version.version, "md5": ptr.md5, "why": missing.message})
    return path
