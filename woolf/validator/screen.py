"""Checks on a delta's tensors before it is merged: no-ops, Templar's norm guard, replays and copies.

Usage (the "queue_limit" and "screen" stages, validator/stages.py, over the validator's context):
    check_queue(ctx, pr)                                    # over its contributor's open-PR limit?
    screened = screen_delta(ctx, adm, main, current, delta)   # raises Rejected

Copies: a delta whose |cosine| to another delta passes `scoring.copy_threshold` (or whose
tensors that are each copies carry half its squared norm) is a copy of the earlier one:
merged versions among the last `scoring.copy_window`, and every open PR the forge received
before this one (queue order, never the id's self-chosen timestamp), found through the copy
index (woolf/validator/copyindex.py: a sketch of each delta, read once). Earliest received wins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from woolf.core.fairness import beyond_limit, canonical
from woolf.core.merge import compute_delta
from woolf.core.scale import f32
from woolf.core.scores import (
    Similarity,
    clip_delta,
    content_sha256,
    norm,
    norm_limit,
    per_contributor,
    similarity,
)
from woolf.errors import Rejected, WoolfError
from woolf.git.repo import BlobTooLargeError
from woolf.ledger.retention.deltas import delta_pointers
from woolf.ledger.verdicts import merged_records
from woolf.protocol.signatures import signatures
from woolf.protocol.signers import signers_text
from woolf.storage.kinds import DENSE, kind_for
from woolf.storage.lazy import LazyTensors
from woolf.storage.pointer import Pointer
from woolf.storage.weights import spec_of
from woolf.validator.admission import Admitted
from woolf.validator.copyindex import indexed_candidates, merged_candidates
from woolf.validator.standing import standing_bound
from woolf.validator.state import MergedContents, OverLimit, ValidatorState

log = logging.getLogger("woolf.validator")
CACHE_BYTES = 64 << 20  # other PRs' deltas kept between PRs (LRU); a big model's are re-read, not kept
SAME = Similarity(1.0, 1.0)  # another delta whose tensors' content is this one's


@dataclass
class Screened:
    delta: dict
    norm: float
    content: str
    flags: list = field(default_factory=list)
    clip: float | None = None  # the factor the delta was scaled by (scoring.norm_action = clip)
    revert_of: str | None = None  # the merged PR this delta exactly takes back (a verified revert)


def open_snapshot(ctx) -> list:
    """The open PRs as this validator's current pass read them (the queue's own view)."""
    snap = ctx.state.open_snapshot
    if snap is None:
        snap = ctx.forge.list(state="open")
    return snap


OVER_LIMIT = "over the open-PR limit: contributor"  # the reason's start; unrated (woolf/ledger/verdicts.py)
FLOOD = "a flood signed by its contributor's key:"  # a signed flood beyond twice the limit: rated, as refused


def _over(state: ValidatorState, snapshot, limit: int) -> dict[str, int]:
    """beyond_limit of the queue as this pass read it: computed once per pass, not once per PR."""
    cached = state.over
    if cached is None or cached.snapshot is not snapshot or cached.limit != limit:
        state.over = cached = OverLimit(snapshot, limit, beyond_limit(snapshot, limit))
    return cached.over


def check_queue(ctx, pr) -> None:
    """A contributor with more open PRs than `queue.max_open_per_contributor`: those received after its
    first that many are rejected unread, not held against its rating (the name may be someone's claim),
    unless every one of more than twice the limit is signed by the contributor's own key: a flood no one
    else can have sent, rated like a copy (a queue slowed down can leave an honest participant over the
    limit, rarely over twice it)."""
    limit = ctx.ledger.config.queue.max_open_per_contributor
    snapshot = open_snapshot(ctx)
    over = _over(ctx.state, snapshot, limit)
    signed = None
    if pr.id in over:
        signed = _signed_alike(ctx.ledger, pr, snapshot)
        if signed is not None:  # signed by the contributor's own key: only its signed PRs count
            over = beyond_limit(signed, limit)
    if pr.id in over and signed is not None and over[pr.id] > 2 * limit:
        raise Rejected(f"{FLOOD} {canonical(pr.contributor)!r} had {over[pr.id]} signed open PRs when the queue "
                       f"was read, over twice the open-PR limit of {limit}: over the limit, this one is not "
                       "judged, and the flood counts against the key's owner (withdraw your own open PRs first)")
    if pr.id in over:
        raise Rejected(f"{OVER_LIMIT} {canonical(pr.contributor)!r} had {over[pr.id]} open PRs when the queue "
                       f"was read, over the limit of {limit}; the {limit} received first are judged, this later one "
                       f"is not ({_room(signed)}, then submit again)")


def _room(signed) -> str:
    """How a contributor makes room: a keyless one cannot withdraw what anyone may have pushed."""
    if signed is not None:
        return "withdraw one of your own open PRs to make room"
    return ("an unsigned name is anyone's to fill: sign with a key listed in ledger/allowed_signers, whose "
            "signed PRs count apart, or wait for verdicts")


def _signed_alike(ledger, pr, snapshot) -> list | None:
    """When ``pr`` is signed by the key its contributor has in main's allowed_signers: that contributor's
    open PRs signed alike (unsigned PRs claiming the name cannot use up its open-PR limit); else None."""
    text = signers_text(ledger.git, ledger.head().commit)
    if text is None:
        return None
    who = canonical(pr.contributor)
    mine = [p for p in snapshot if canonical(p.contributor) == who][:256]
    found = signatures(ledger.git, {p.head: text for p in mine + [pr]})
    if found.get(pr.head) != ("G", pr.contributor):
        return None
    return [p for p in mine if found.get(p.head) == ("G", p.contributor)]


def _load(ledger, state: ValidatorState, pointer: Pointer, key: str, spec,
          declared: dict | None = None) -> dict | None:
    """Another PR's delta (hostile like any), bounded and checked, a compressed one expanded
    (``declared``: its submission's delta kind and parameters); None when it cannot be read."""
    cache = state.deltas
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    cfg = ledger.config
    declared = declared or DENSE.declared()
    try:
        path = ledger.store.fetch_object(pointer, max_bytes=cfg.limits.max_delta_bytes,
                                           deadline=cfg.forge.delta_timeout)
        kind = kind_for(declared)
        if not kind.held_whole(pointer.size, CACHE_BYTES):  # compared tensor by tensor, not kept
            return kind.open(path, declared, spec, cfg.limits, "delta")
        delta = kind.load(path, declared, spec, cfg.limits, "delta")
    except WoolfError as exc:
        log.info("copy check: delta %s unreadable (%s)", key[:16], exc.message)
        return None
    cache[key] = delta
    sizes = {k: sum(t.numel() * t.element_size() for t in d.values()) for k, d in cache.items()}
    total = sum(sizes.values())
    while cache and total > CACHE_BYTES:
        old, _ = cache.popitem(last=False)
        total -= sizes[old]
    return delta


def _earlier(ctx, adm: Admitted, spec, delta, content: str):
    """(label, delta, PR id) of merged recent deltas, then of open PRs received before this one; the delta
    is None for one whose tensors' content is this PR's (the copy index proved its bytes: a copy unread)."""
    ledger, state = ctx.ledger, ctx.state
    cfg = ledger.config.scoring
    recs = [r for r in merged_records(ledger, limit=cfg.copy_window) if r.id and r.head and r.version is not None]
    merges = {x.version: x for x in ledger.log(limit=cfg.copy_window) if x.submission}
    try:  # every pointer and declared kind in two git calls, not a few per merged PR
        pointers = delta_pointers(ledger, [merges[r.version] for r in recs if r.version in merges])
    except (WoolfError, BlobTooLargeError) as exc:
        log.info("copy check: merged deltas unreadable (%s)", getattr(exc, "message", exc))
        pointers = {}
    # merged deltas through the copy index too (a sketch each, read once per validator)
    keyed = [(r, *pointers[r.version], r.delta_sha256 or pointers[r.version][0].md5) for r in recs
             if r.version in pointers]  # (record, pointer, declared, key): the item and what reads it
    merged = [(k, k[1], k[2], k[3]) for k in keyed]
    for (rec, ptr, declared, key), same in merged_candidates(ledger, state, adm, merged, (delta, content), spec,
                                                             _load):
        d = None if same else _load(ledger, state, ptr, key, spec, declared)  # same content: nothing to read
        if same or d is not None:
            yield f"merged PR {rec.id} (version {rec.version})", d, rec.id
    snapshot = open_snapshot(ctx)
    mine = next((p for p in snapshot if p.id == adm.meta["id"]), None)
    if mine is None:
        return
    over = _over(state, snapshot, ledger.config.queue.max_open_per_contributor)
    earlier = [p for p in snapshot if p.queue_key() < mine.queue_key() and p.id not in over]
    # every earlier open PR, through the copy index (validator/copyindex.py), not the 64 oldest
    for (p, ptr, d), same in indexed_candidates(ledger, state, adm, earlier, (delta, content), spec, _load):
        other = None if same else _load(ledger, state, ptr, d["sha256"], spec, d)  # same content: a copy
        if same or other is not None:
            yield f"PR {p.id}, open and received earlier", other, p.id


def _contents(ctx, main) -> dict:
    """{tensor content sha256: (version, PR id)} of every merged delta, read once per main head."""
    cached = ctx.state.contents
    if not cached or cached.main != main.commit:
        cached = MergedContents(main.commit, {r.content: (r.version, r.id)
                                              for r in merged_records(ctx.ledger) if r.content})
        ctx.state.contents = cached
    return cached.contents


def _state_now(forge, sub_id: str) -> str:
    try:
        return forge.refresh(sub_id).state
    except WoolfError:
        return "unknown"


def verified_revert(ledger, adm: Admitted, delta: dict[str, torch.Tensor]):
    """The version (V) whose merge this delta takes back, if it is exactly parent(V) − V; else None.

    A `reverts` claim (admission checked it names version V on main at or before the base)
    is only a label; a delta that is bit for bit what `woolf revert` computes earns the
    exemptions a revert needs (the norm guard, the negation of its own target, no measurable
    effect on the benchmark or a shard); any other delta is judged like every PR.
    """
    claim = adm.meta.get("reverts")
    if not isinstance(claim, dict) or not isinstance(claim.get("version"), int):
        return None
    number = claim["version"]
    target = ledger.version_at(claim.get("commit", ""))
    if target is None or target.version != number or number < 1 or not target.submission:
        return None
    parent = ledger.version_at(target.parents[0]) if target.parents else None
    if parent is None:
        return None
    try:  # weights storage cannot serve or that fail their hash grant no exemption (never stop the pass)
        expected = compute_delta(ledger.load_weights(parent), ledger.load_weights(target))
    except WoolfError as exc:
        log.info("revert check: weights of version %d or %d unreadable (%s)", parent.version, number, exc.message)
        return None
    if set(expected) != set(delta) or not all(torch.equal(expected[k], delta[k]) for k in delta):
        return None
    return target


def _revert_family(ledger, target) -> set:
    """The PRs a verified revert of ``target`` may resemble: the target's, and, when the target was
    itself a revert, the merge that one took back (a revert of a revert restores it), and so on."""
    family, version = {target.submission}, target.reverts
    for _ in range(16):
        if version is None:
            break
        v = ledger.show(version)
        family.add(v.submission)
        version = v.reverts
    return family


def screen_delta(ctx, adm: Admitted, main, current: dict[str, torch.Tensor], delta: dict[str, torch.Tensor],
                 norms: tuple[float, float] | None = None) -> Screened:
    """``norms``: (delta's, model's) as the validator's norm check computed them (scores.norm)."""
    ledger, forge = ctx.ledger, ctx.forge
    cfg = ledger.config
    sc = cfg.scoring
    target = verified_revert(ledger, adm, delta)
    revert_of = target.submission if target else None
    family = _revert_family(ledger, target) if target else set()
    n, w = norms if norms is not None else (norm(delta), norm(current))
    if cfg.limits.min_delta_norm_ratio > 0 and n <= cfg.limits.min_delta_norm_ratio * max(w, 1e-12):
        raise Rejected(f"the delta is a no-op (norm {n:.3g}, {n / max(w, 1e-12):.3g}x the model's, under "
                       f"limits.min_delta_norm_ratio {cfg.limits.min_delta_norm_ratio:g}); it would change nothing")
    content = getattr(delta, "content", None) or content_sha256(delta)  # from the load's read
    recent = merged_records(ledger, limit=max(sc.copy_window, sc.norm_window))
    norms = per_contributor([(r.contributor, r.delta_norm) for r in recent], sc.norm_window)
    what, least = f"the median norm of the last {len(norms or ())} contributors' merged deltas", 2
    if norms is None:  # under 3 merges, or one contributor's alone: they bound that contributor's deltas only
        who = canonical(adm.meta["contributor"])
        norms = [r.delta_norm for r in recent[: sc.norm_window] if r.delta_norm is not None and r.contributor == who]
        what, least = f"the median norm of its last {len(norms)} merged deltas", 3
    # keyless names may raise the median, never lower it under keyed contributors' or the floor
    bound = standing_bound(ctx, main, norm_limit(norms, sc.norm_multiple, least), w)  # validator/standing.py
    limit = bound.limit if bound is not None else None
    flags, clip = ["revert"] if revert_of else [], None
    if limit is not None and n > limit and not revert_of:  # a revert is as large as the merge it undoes
        if sc.norm_action == "reject":
            raise Rejected(f"delta norm {n:.4g} is over {sc.norm_multiple:g}x {what} "
                           f"({limit / sc.norm_multiple:.4g}{bound.note})")
        clip = f32(limit / n)
        if isinstance(delta, LazyTensors):  # read tensor by tensor: later reads come back clipped, the same bits
            delta.clip(clip)
        else:
            delta.update(clip_delta(delta, clip))  # the merge uses the clipped delta; the audit too (Woolf-Delta-Clip)
        flags.append("clipped")
        n = norm(delta)
    seen = _contents(ctx, main).get(content)
    if seen:
        raise Rejected(f"replay: the same tensors were already merged as version {seen[0]} "
                       f"(PR {seen[1]}), whatever the file's bytes")
    spec = spec_of(current)
    for label, other, other_id in _earlier(ctx, adm, spec, delta, content):
        if other_id == adm.meta["id"] or other_id in family:  # a verified revert negates its target
            continue
        sim = SAME if other is None else similarity(delta, other, sc.copy_threshold)
        if not sim.is_copy(sc.copy_threshold):
            continue
        if not label.startswith("merged") and _state_now(forge, other_id) not in ("open", "merged"):
            continue  # the earlier one was rejected or withdrawn since: it protects nothing
        what = "a negation" if sim.cosine <= -sc.copy_threshold else "a copy"
        raise Rejected(f"{what} of {label}: cosine {sim.cosine:+.4f}, {sim.copied_share:.0%} of its norm in "
                       f"copied tensors (threshold {sc.copy_threshold:g}); the earliest received submission wins")
    return Screened(delta, n, content, flags, clip, revert_of)
