"""The copy index: every earlier open PR is a candidate original, not the 64 oldest.

Usage (screen's copy check, with the validator's ValidatorState):
    index = copy_index(state)                                 # one per validator, a secret seed
    mine = index.add(sha256, delta)                           # content hash and sketch of this PR's delta
    for p in index.candidates(mine, earlier, load):           # earlier open PRs that may be its original
        ...                                                   # compared exactly (core.scores.similarity)

Each delta is read once per validator: its tensors' content sha256 and a count sketch (core/sketch.py,
WIDTH numbers per tensor, seeded by a secret drawn when the validator starts) are kept by delta sha256.
A PR is then compared with every earlier open PR's sketch (microseconds each); only those whose
estimated cosine or copied share comes near the threshold (SLACK under it), or whose content is the
same, are read again and compared exactly, at most MAX_EXACT of them, the most similar first.
An unreadable delta is remembered as such (it protects nothing: it would be rejected itself).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import torch

from woolf.core.scores import content_sha256
from woolf.core.sketch import estimate_many, matrix, sketch, sketch_tensor
from woolf.errors import WoolfError
from woolf.storage.pointer import Pointer
from woolf.storage.weights import spec_of
from woolf.validator.intake import declared_bound

SLACK = 0.35  # estimated |cosine| or per-tensor cosine this far under the threshold still gets an exact look
MAX_EXACT = 8  # earlier PRs compared exactly with one PR, at most (the most similar by sketch)


@dataclass(frozen=True)
class Entry:
    content: str  # core.scores.content_sha256 of the delta's tensors
    names: tuple  # its floating tensors' names, in order
    sketch: torch.Tensor  # core.sketch.matrix of their sketches: (tensors, WIDTH)


class CopyIndex:
    def __init__(self, seed: bytes | None = None):
        self.seed = seed or secrets.token_bytes(32)
        self.entries: dict[str, Entry | None] = {}  # delta sha256 -> its entry (None: unreadable)
        self.ahead: dict[str, dict] = {}  # delta sha256 -> its sketch, made by norm_and_sketch (at most one)
        self.norms: dict[str, dict] = {}  # delta sha256 -> its tensors' norms, made by as_read (at most one)

    def _entry(self, delta, content: str | None = None, sk: dict | None = None) -> Entry:
        sk = sketch(delta, self.seed) if sk is None else sk
        return Entry(content or content_sha256(delta), tuple(sorted(sk)), matrix(sk))

    def add(self, key: str, delta, content: str | None = None) -> Entry:
        """This PR's own entry (its delta is in memory already, or its sketch was made ahead)."""
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = self._entry(delta, content, self.ahead.pop(key, None))
        return entry

    def as_read(self, key: str, expect: dict):
        """``on_tensor`` for storage/lazy.py read_hashed: each floating tensor's norm and sketch from the
        read that hashes the delta (one read of its bytes for all of them), for tensors whose
        name, dtype and shape are the model's (``expect``: a delta that is not is refused once opened);
        ``norm_and_sketch`` takes them when every floating tensor was seen."""
        self.ahead.clear()  # one PR's at a time: a PR refused before its copy check leaves nothing behind
        self.norms.clear()
        sk, norms = {}, {}
        self.ahead[key], self.norms[key] = sk, norms

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
        total, sk = 0.0, {}
        buf = delta.scratch()  # one tensor's memory, reused
        for name in sorted(delta.keys()):
            t = delta.read_into(name, buf)
            if t.is_floating_point():
                total += float(torch.linalg.vector_norm(t, dtype=torch.float32)) ** 2
                sk[name] = sketch_tensor(t, self.seed, name)
        self.ahead[key] = sk
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
        self.entries.pop(key, None)
        self.ahead.pop(key, None)
        self.norms.pop(key, None)

    def prune(self, keep: set[str]) -> None:
        """Forget the deltas of PRs no longer open (``keep``: the sha256s still wanted)."""
        for key in [k for k in self.entries if k not in keep]:
            del self.entries[key]

    def candidates(self, mine: Entry, earlier: list, threshold: float) -> list:
        """Of ``earlier`` [(item, entry or None)], the items that may be copies of ``mine`` (or it of
        them), most similar first: same content, or an estimate within SLACK of the threshold."""
        same = [(2.0, item) for item, other in earlier if other is not None and other.content == mine.content]
        alike = [(item, other) for item, other in earlier if other is not None and other.content != mine.content
                 and other.names == mine.names]
        scored = list(same)
        if alike and mine.names:
            cos, share = estimate_many(mine.sketch, torch.stack([o.sketch for _, o in alike]),
                                       max(0.0, threshold - SLACK))  # per tensor: SLACK under the threshold
            for (item, _), c, s in zip(alike, cos.tolist(), share.tolist(), strict=True):
                if abs(c) >= threshold - SLACK or s >= 0.5:
                    scored.append((max(abs(c), s), item))
        scored.sort(key=lambda x: -x[0])
        return [item for _, item in scored[:MAX_EXACT]]


def copy_index(state) -> CopyIndex:
    """The validator's index, made on first use (it lives as long as the ValidatorState)."""
    index = getattr(state, "copy_index", None)
    if index is None:
        index = state.copy_index = CopyIndex()
    return index


def _pointer(d, spec, limits):
    """The storage pointer of an open PR's declared delta; None for a URL, a malformed declaration, or
    one over what the model allows (validator/intake.py: never downloaded for a comparison either)."""
    if not isinstance(d, dict) or "url" in d or not isinstance(d.get("md5"), str) \
            or not isinstance(d.get("size"), int) or not isinstance(d.get("sha256"), str):
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
    """Of ``sources`` [(item, pointer, declared delta, key)], the items whose entries may be copies of
    this PR's delta (``mine``: (delta, content sha256)), most similar first, at most MAX_EXACT."""
    index = copy_index(state)
    delta, content = mine
    me = index.add(adm.meta["delta"]["sha256"], delta, content)
    items = []
    for item, ptr, d, key in sources:
        entry = index.entry(key, lambda: load(ledger, state, ptr, key, spec, d))  # noqa: B023
        items.append((item, entry))
    return index.candidates(me, items, ledger.config.scoring.copy_threshold)


def indexed_candidates(ledger, state, adm, earlier: list, mine: tuple, spec, load) -> list:
    """[(PR, pointer, declared delta)] of the ``earlier`` open PRs that may be copies of this PR's
    delta (``mine``: (delta, content sha256)), most similar first; each read once per validator
    (``load(ledger, state, pointer, sha256, spec, declared)``: screen._load)."""
    index = copy_index(state)
    _prune(index, state, adm, earlier)
    sources = []
    for p in earlier:
        d = (p.submission or {}).get("delta")
        ptr = _pointer(d, spec, ledger.config.limits)
        if ptr is not None:
            sources.append(((p, ptr, d), ptr, d, d["sha256"]))
    return _judged(ledger, state, adm, sources, mine, spec, load)


def merged_candidates(ledger, state, adm, merged: list, mine: tuple, spec, load) -> list:
    """Of ``merged`` [(item, pointer, declared delta, key)] (recent merged deltas; key: the delta's
    sha256), the items that may be copies of this PR's delta, most similar first (a merged
    delta is sketched once per validator, usually when it was judged as a PR, not read per PR). Their
    own MAX_EXACT: open PRs withdrawn later can never crowd a merged original out of the exact look."""
    return _judged(ledger, state, adm, merged, mine, spec, load)
