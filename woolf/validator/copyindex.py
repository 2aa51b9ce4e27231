"""The copy index: every earlier open PR is a candidate original, and no crowd can push one out of the exact look.

Usage (screen's copy check, with the validator's ValidatorState):
    index = copy_index(state)                                 # one per validator, a secret seed
    mine = index.add(sha256, delta)                           # content hash, sketch, norms of this PR's delta
    for p, same in index.candidates(mine, earlier, 0.97):     # earlier open PRs that may be its original
        ...                                                   # same content: a copy; else compared exactly

Each delta is read once per validator: its tensors' content sha256, a count sketch (core/sketch.py,
WIDTH numbers per tensor, seeded by a secret drawn when the validator starts) and its tensors' norms
are kept by delta sha256. A PR is then compared with every earlier open PR's sketch (microseconds
each). What takes part, and how (the crowded copy check: eight PRs that merely declared a copy's
sha256 once filled the eight exact places, and a signed copy of an honest PR merged first):

- only a delta whose bytes were read and proven to be the sha256 its PR declares, and that reads as
  the kind and parameters it declares, has an entry (``proven``, ``keyed``): a PR declaring another's
  sha256, or another kind for the same bytes, or whose delta cannot be had, takes no place;
- an earlier PR with the same tensor content is a copy outright, decided by the content hash without
  reading it again, however many there are;
- every earlier PR the sketches cannot rule out as a copy (core/sketch.py may_copy_many: a band of
  about 0.04 under a 0.97 threshold, its width from the sketch's own error) is compared exactly,
  however many there are: a crowd costs the validator one read of each of its members, never the
  original its place;
- of the rest, those whose estimate comes within SLACK of the threshold get an exact look, at most
  MAX_EXACT, the most similar first: a wider net a crowd may fill, and nothing relies on it.
An open PR whose delta is a URL takes part alike once its bytes are here (validator/copyfetch.py
downloads them, all at once and once a pass, within the keyless budgets).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import torch

from woolf.core.scores import content_sha256
from woolf.core.sketch import estimate_many, matrix, may_copy_many, sketch_tensor
from woolf.errors import WoolfError
from woolf.storage.pointer import Pointer
from woolf.storage.weights import spec_of
from woolf.validator.copyfetch import fetch_for_copies
from woolf.validator.intake import declared_bound

SLACK = 0.35  # estimated |cosine| or per-tensor cosine this far under the threshold still gets an exact look
MAX_EXACT = 8  # earlier PRs outside the band compared exactly with one PR, at most (the most similar by sketch)


@dataclass(frozen=True)
class Entry:
    content: str  # core.scores.content_sha256 of the delta's tensors
    names: tuple  # its floating tensors' names, in order
    sketch: torch.Tensor  # core.sketch.matrix of their sketches: (tensors, WIDTH)
    norms2: torch.Tensor | None = None  # their exact squared norms (float64, same order); None: not measured


class CopyIndex:
    def __init__(self, seed: bytes | None = None):
        self.seed = seed or secrets.token_bytes(32)
        self.entries: dict[str, Entry | None] = {}  # delta sha256 -> its entry (None: unreadable)
        self.ahead: dict[str, dict] = {}  # delta sha256 -> its sketch, made by norm_and_sketch (at most one)
        self.norms: dict[str, dict] = {}  # delta sha256 -> its tensors' norms, made by as_read (at most one)
        self.ahead_norms: dict[str, dict] = {}  # delta sha256 -> its tensors' norms, beside ``ahead``
        self.proofs: dict[tuple, bool] = {}  # (md5, size, sha256) -> whether that object hashes to that sha256
        self.fetch_pass: object = None  # the pass whose URL deltas copyfetch tried (its open snapshot)
        self.declared: dict[str, tuple] = {}  # entry key -> the declared kind and parameters it was read under
        self.fetch_tried: set[str] = set()  # md5s of URL deltas tried in that pass

    def _entry(self, delta, content: str | None = None, sk: dict | None = None, norms: dict | None = None) -> Entry:
        if sk is None:  # one read of each tensor for its sketch and its norm
            sk, norms = {}, {}
            for name in sorted(delta.keys()):
                t = delta[name]
                if t.is_floating_point():
                    sk[name] = sketch_tensor(t, self.seed, name)
                    norms[name] = float(torch.linalg.vector_norm(t, dtype=torch.float32))
        names = tuple(sorted(sk))
        n2 = None
        if norms is not None and sorted(norms) == list(names):
            n2 = torch.tensor([norms[n] ** 2 for n in names], dtype=torch.float64)
        return Entry(content or content_sha256(delta), names, matrix(sk), n2)

    def add(self, key: str, delta, content: str | None = None) -> Entry:
        """This PR's own entry (its delta is in memory already, or its sketch was made ahead)."""
        entry = self.entries.get(key)
        if entry is None or entry.norms2 is None:  # this PR's own entry needs its norms (may_copy_many)
            sk, norms = self.ahead.pop(key, None), self.ahead_norms.pop(key, None)
            entry = self.entries[key] = self._entry(delta, content, sk if norms is not None else None, norms)
        return entry

    def as_read(self, key: str, expect: dict):
        """``on_tensor`` for storage/lazy.py read_hashed: each floating tensor's norm and sketch from the
        read that hashes the delta (one read of its bytes for all of them), for tensors whose
        name, dtype and shape are the model's (``expect``: a delta that is not is refused once opened);
        ``norm_and_sketch`` takes them when every floating tensor was seen."""
        self.ahead.clear()  # one PR's at a time: a PR refused before its copy check leaves nothing behind
        self.norms.clear()
        self.ahead_norms.clear()
        sk, norms = {}, {}
        self.ahead[key], self.norms[key], self.ahead_norms[key] = sk, norms, norms

        def on_tensor(name: str, t: torch.Tensor) -> None:
            if t.is_floating_point() and name in expect and spec_of({name: t})[name] == tuple(expect[name]):
                norms[name] = float(torch.linalg.vector_norm(t, dtype=torch.float32))
                sk[name] = sketch_tensor(t, self.seed, name)

        return on_tensor

    def norm_and_sketch(self, key: str, delta) -> float:
        """core.scores.norm of ``delta`` (the same sum in the same order) and its sketch, from one read of
        each tensor (a delta read from its file reads it again at each use): ``add(key, ...)`` takes the
        sketch. The sketch is of the delta as read, before any clip, as every other entry is.
        Made already from the load's read (``as_read``): taken from there, nothing read again."""
        floating = [n for n in sorted(delta.keys()) if delta.dtype_of(n).is_floating_point]
        norms = self.norms.pop(key, None)
        if norms is not None and key in self.ahead and sorted(norms) == floating:
            return math.sqrt(sum(norms[n] ** 2 for n in floating))
        self.ahead.clear()  # one PR's at a time: a PR refused before its copy check leaves nothing behind
        self.ahead_norms.clear()
        total, sk, each = 0.0, {}, {}
        buf = delta.scratch()  # one tensor's memory, reused
        for name in sorted(delta.keys()):
            t = delta.read_into(name, buf)
            if t.is_floating_point():
                each[name] = float(torch.linalg.vector_norm(t, dtype=torch.float32))
                total += each[name] ** 2
                sk[name] = sketch_tensor(t, self.seed, name)
        self.ahead[key], self.ahead_norms[key] = sk, each
        return math.sqrt(total)

    def entry(self, key: str, load) -> Entry | None:
        """The entry of the delta ``key``; ``load()`` reads it (None when unreadable) the first time."""
        if key not in self.entries:
            delta = load()
            self.entries[key] = None if delta is None else self._entry(delta)
        return self.entries[key]

    def forget(self, key: str) -> None:
        """Drop what was made of the delta ``key`` (its bytes were found not to be that sha256's:
        validator/step.py; an honest entry of that key is made again from its own bytes when needed)."""
        for k in [k for k in self.entries if k == key or k.startswith(f"{key} ")]:  # under any declaration
            del self.entries[k]
        self.ahead.pop(key, None)
        self.norms.pop(key, None)
        self.ahead_norms.pop(key, None)

    def keyed(self, sha256: str, declared) -> str:
        """The entry key of a delta of ``sha256`` read under ``declared`` (its kind and parameters): the
        sha256 for the first declaration it is read under, another key for another (the same bytes read
        as another kind, or with other parameters, are other tensors, or none)."""
        how = _how(declared)
        first = self.declared.setdefault(sha256, how)
        if first == how:
            return sha256
        key = f"{sha256} {how}"
        self.declared.setdefault(key, how)
        return key

    def prune(self, keep: set[str]) -> None:
        """Forget the deltas of PRs no longer open (``keep``: the sha256s still wanted)."""
        for key in [k for k in self.entries if k.split(" ", 1)[0] not in keep]:
            del self.entries[key]
        for key in [k for k in self.declared if k.split(" ", 1)[0] not in keep]:
            del self.declared[key]
        for proof in [p for p in self.proofs if p[2] not in keep]:
            del self.proofs[proof]

    def proven(self, ledger, pointer: Pointer, sha256: str | None, url: bool = False) -> bool:
        """Whether ``pointer``'s object, md5-verified, hashes to ``sha256`` (None: trusted, a merged
        delta of main). Storage objects are fetched (size-capped, within forge.delta_timeout) and the
        answer kept; a URL delta is only looked for in the cache (validator/copyfetch.py put it there),
        and its absence is not kept: it may arrive next pass."""
        if sha256 is None:
            return True
        key = (pointer.md5, pointer.size, sha256)
        if key in self.proofs:
            return self.proofs[key]
        store, cfg = ledger.store, ledger.config
        try:
            if url:
                path = store.cache_path(pointer.md5)
                if not (path.is_file() and path.stat().st_size == pointer.size):
                    return False
            else:
                path = store.fetch_object(pointer, max_bytes=cfg.limits.max_delta_bytes,
                                          deadline=cfg.forge.delta_timeout)
            ok = store.hashes(path)[1] == sha256  # hashed as it was fetched: usually no read here
        except (WoolfError, OSError):
            ok = False
        self.proofs[key] = ok
        return ok

    def candidates(self, mine: Entry, earlier: list, threshold: float) -> list:
        """Of ``earlier`` [(item, entry or None)], [(item, same content)] of those that may be copies of
        ``mine`` (or it of them): every one with the same content, every one the sketches cannot rule
        out (core.sketch.may_copy_many), most similar first, then at most MAX_EXACT of the others whose
        estimate is within SLACK of the threshold. An item without an entry takes no place."""
        same = [(item, True) for item, other in earlier if other is not None and other.content == mine.content]
        alike = [(item, other) for item, other in earlier if other is not None and other.content != mine.content
                 and other.names == mine.names]
        if not alike or not mine.names:
            return same
        stacked = torch.stack([o.sketch for _, o in alike])
        cos, share = estimate_many(mine.sketch, stacked, max(0.0, threshold - SLACK))  # per tensor: SLACK under
        score = torch.maximum(cos.abs(), share)
        norms2 = mine.norms2 if mine.norms2 is not None else (mine.sketch.to(torch.float64) ** 2).sum(-1)
        maybe = may_copy_many(mine.sketch, norms2, stacked, threshold)
        band, wide = [], []
        for (item, _), m, c, s, sc in zip(alike, maybe.tolist(), cos.tolist(), share.tolist(), score.tolist(),
                                          strict=True):
            if m:
                band.append((sc, item))
            elif abs(c) >= threshold - SLACK or s >= 0.5:
                wide.append((sc, item))
        band.sort(key=lambda x: -x[0])
        wide.sort(key=lambda x: -x[0])
        return same + [(item, False) for _, item in band] + [(item, False) for _, item in wide[:MAX_EXACT]]


def _how(declared) -> tuple:
    """A declared delta's kind and parameters: what its bytes are read as (storage/kinds/)."""
    d = declared if isinstance(declared, dict) else {}
    return tuple(str(d.get(k)) for k in ("kind", "chunk", "k", "bits"))


def copy_index(state) -> CopyIndex:
    """The validator's index, made on first use (it lives as long as the ValidatorState)."""
    index = getattr(state, "copy_index", None)
    if index is None:
        index = state.copy_index = CopyIndex()
    return index


def _pointer(d, spec, limits):
    """The storage pointer of an open PR's declared delta (its URL's object too, cached under its md5);
    None for a malformed declaration, or one over what the model allows (validator/intake.py: never
    downloaded for a comparison either)."""
    if not isinstance(d, dict) or not isinstance(d.get("md5"), str) or not isinstance(d.get("size"), int) \
            or not isinstance(d.get("sha256"), str) or not isinstance(d.get("url", ""), str):
        return None
    try:
        if d["size"] > declared_bound(d, spec, limits):
            return None
        return Pointer(d["md5"], d["size"], "delta.safetensors")
    except (WoolfError, ValueError, TypeError, KeyError):
        return None


def _prune(index: CopyIndex, state, adm, earlier: list) -> None:
    snapshot = getattr(state, "open_snapshot", None) or earlier
    if len(index.entries) > 2 * len(snapshot) + 256:  # PRs settled since the queue was read: their entries go
        keep = {adm.meta["delta"]["sha256"]}
        for p in snapshot:
            d = (p.submission or {}).get("delta")
            if isinstance(d, dict) and isinstance(d.get("sha256"), str):
                keep.add(d["sha256"])
        index.prune(keep)


def _judged(ledger, state, adm, sources: list, mine: tuple, spec, load) -> list:
    """Of ``sources`` [(item, pointer, declared delta, key, sha256 to prove or None)], [(item, same
    content)] of those whose entries may be copies of this PR's delta (``mine``: (delta, content
    sha256)), as CopyIndex.candidates orders them. A source whose bytes are not proven to be its
    sha256 takes no place."""
    index = copy_index(state)
    delta, content = mine
    me = index.add(index.keyed(adm.meta["delta"]["sha256"], adm.meta["delta"]), delta, content)
    items = []
    for item, ptr, d, key, sha in sources:
        url = isinstance(d, dict) and "url" in d
        if not index.proven(ledger, ptr, sha, url):
            items.append((item, None))
            continue
        key = index.keyed(key, d)  # read under its own declaration: one it cannot be read under takes no place
        entry = index.entry(key, lambda: load(ledger, state, ptr, key, spec, d))  # noqa: B023
        items.append((item, entry))
    return index.candidates(me, items, ledger.config.scoring.copy_threshold)


def indexed_candidates(ledger, state, adm, earlier: list, mine: tuple, spec, load) -> list:
    """[((PR, pointer, declared delta), same content)] of the ``earlier`` open PRs that may be copies of
    this PR's delta (``mine``: (delta, content sha256)), as CopyIndex.candidates orders them; each read
    once per validator (``load(ledger, state, pointer, sha256, spec, declared)``: screen._load), a URL
    delta once validator/copyfetch.py has brought it."""
    index = copy_index(state)
    _prune(index, state, adm, earlier)
    declared = _declared(earlier, spec, ledger)
    sources = [(item, item[1], item[2], item[2]["sha256"], item[2]["sha256"]) for item in declared]
    urls = [item for item in declared if "url" in item[2]]
    if urls:  # their bytes first, with every open PR's URL delta at once (validator/copyfetch.py)
        snapshot = getattr(state, "open_snapshot", None) or earlier
        fetch_for_copies(ledger, state, index, urls, [i for i in _declared(snapshot, spec, ledger) if "url" in i[2]])
    return _judged(ledger, state, adm, sources, mine, spec, load)


def _declared(prs: list, spec, ledger) -> list:
    """[(PR, pointer, declared delta)] of those ``prs`` whose declared delta may be compared (``_pointer``)."""
    out = []
    for p in prs:
        d = (p.submission or {}).get("delta")
        ptr = _pointer(d, spec, ledger.config.limits)
        if ptr is not None:
            out.append((p, ptr, d))
    return out


def merged_candidates(ledger, state, adm, merged: list, mine: tuple, spec, load) -> list:
    """Of ``merged`` [(item, pointer, declared delta, key)] (recent merged deltas; key: the delta's
    sha256), [(item, same content)] of those that may be copies of this PR's delta (a merged delta is
    sketched once per validator, usually when it was judged as a PR, not read per PR). Their own
    MAX_EXACT: open PRs withdrawn later can never crowd a merged original out of the exact look.
    Main's versions are trusted: nothing is proven."""
    return _judged(ledger, state, adm, [(*m, None) for m in merged], mine, spec, load)
