"""A PR's proof of training, audited: its rules on every PR, and the replay of a drawn PR's segments.

Usage (from woolf/validator/retrain.py's two hooks):
    why = proof_problem(adm)                         # every PR with a proof: None, or "retrain: its chain ..."
    why = unproven(ledger, adm)                      # None, or why its start cannot be proven (carried state)
    adm.audit = prepare(ctx, adm, pr, material)      # drawn: challenged and waiting (Deferred), or states ready
    reason = audit(ctx, adm, cand, draw)             # after the scores: replay, compare; fills cand.retrain

docs/protocol.md#the-audit: a drawn PR's start is checked without asking anyone (the version's weights,
a fresh optimizer or its previous PR's end), its audited segments (always the final one, and
proof.segments others from the draw) are replayed from the states its participant served
(validator/audit_wait.py) bit for bit within the recipe's device class, within
validators.retrain_tolerance of the served end across classes, and the final segment's end gives
the submitted delta exactly. A mismatch names the first step whose loss or gradient norm differs.
"""

from __future__ import annotations

import logging
import math
import time

import torch

from woolf.core.chain import relative_distance
from woolf.errors import Rejected, WoolfError
from woolf.git.repo import BlobTooLargeError
from woolf.ledger.proof_states import fetch_state
from woolf.ledger.replay import ReplayTimeout, final_shift, replay_segment, start_digests, workload_for
from woolf.protocol import layout
from woolf.protocol.layout import META_MAX_BYTES, META_MAX_DEPTH
from woolf.protocol.proof import (
    EMPTY,
    check_proof,
    draw_segments,
    same_class,
    segment_bounds,
    state_digest,
)
from woolf.protocol.recipe import RETRAIN_FLAG
from woolf.protocol.safejson import loads_untrusted
from woolf.storage.kinds import kind_for
from woolf.storage.kinds.base import Derivation
from woolf.storage.weights import load_checked
from woolf.validator.audit_wait import samples_of, states_for
from woolf.workloads.features import SAMPLES, features_of
from woolf.workloads.proof import device_class

log = logging.getLogger("woolf.validator")


def proof_problem(adm) -> str | None:
    """The rules a proof is held to on every PR, drawn or not (no weights read): "retrain: its chain ..."."""
    recipe = adm.meta.get("recipe")
    proof = recipe.get("proof") if isinstance(recipe, dict) else None
    if proof is None:
        return None
    why = check_proof(proof, steps=recipe["steps"], delta_sha256=adm.meta["delta"]["sha256"],
                      base_version=adm.base.version)
    return f"retrain: {why}" if why else None


def _submission(ledger, sub_id: str) -> dict | None:
    """Another PR's submission.json as data (the PR a carried state continues), or None."""
    if not layout.SUBMISSION_ID.match(sub_id):
        return None
    try:
        raw = ledger.git.show_bytes(f"{layout.PR_PREFIX}/{sub_id}/head:{layout.submission_paths(sub_id)[2]}",
                                    max_bytes=META_MAX_BYTES)
        meta = loads_untrusted(raw, META_MAX_BYTES, META_MAX_DEPTH) if raw is not None else None
    except (BlobTooLargeError, ValueError, WoolfError):
        return None
    return meta if isinstance(meta, dict) else None


def unproven(ledger, adm) -> str | None:
    """Why the state a PR's chain starts from cannot be proven, or None. Its optimizer state and its
    residual going in must be the ends its previous PR committed to (a fresh optimizer needs none).
    Raises Rejected when it names a previous PR whose ends are not its start."""
    proof = adm.meta["recipe"]["proof"]
    if adm.meta["recipe"]["data"]["kind"] == "private" and SAMPLES not in features_of(ledger.workload()):
        return "private data, and its workload cannot serve the samples of a segment (no `samples` feature)"
    opt, residual = proof["start"]["opt"], proof["end"].get("residual_in")
    if opt == EMPTY and residual is None:
        return None
    prev_id = proof["start"].get("carried")
    if not prev_id:
        return "its optimizer state or residual continues no PR of its contributor (a run not submitted)"
    prev = _submission(ledger, prev_id)
    who = adm.meta["contributor"]
    if prev is None or prev.get("contributor") != who or prev_id.split("-", 1)[1].rsplit("-", 1)[0] != who:
        return f"the PR its state continues ({prev_id[:60]}) is not one of {who}'s on this hub"
    end = ((prev.get("recipe") or {}).get("proof") or {}).get("end") if isinstance(prev.get("recipe"), dict) else None
    if not isinstance(end, dict):
        return f"the PR its state continues ({prev_id}) has no proof"
    if opt != EMPTY and end.get("opt") != opt:
        raise Rejected(f"retrain: its optimizer state is not the end of {prev_id}, which it says it continues")
    if residual is not None and end.get("residual_out") != residual:
        raise Rejected(f"retrain: its residual going in is not what {prev_id} left, which it says it continues")
    return None


def prepare(ctx, adm, pr, material: bytes):
    """A drawn PR's plan: its segments and their served states, checked (validator/audit_wait.py)."""
    proof = adm.meta["recipe"]["proof"]
    segments = draw_segments(material, len(proof["links"]) - 1, ctx.ledger.config.proof.segments)
    ends = not same_class(proof["class"], device_class(ctx.device))
    return states_for(ctx, adm, pr, segments, ends)


def _first_difference(served: list[str], replayed: list[str]) -> int | None:
    for i, (a, b) in enumerate(zip(served, replayed, strict=False)):
        if a != b:
            return i
    return None if len(served) == len(replayed) else min(len(served), len(replayed))


def _mismatch(cand, record: dict, reason: str, **more) -> str:
    cand.retrain = {**record, "retrain": "mismatch", **more}
    if RETRAIN_FLAG not in cand.flags:
        cand.flags.append(RETRAIN_FLAG)
    return reason


def _start(ctx, adm, kind, cache) -> str | None:
    """Why the chain's first state is not the one `woolf train` begins the recipe with, or None."""
    recipe = adm.meta["recipe"]
    proof = recipe["proof"]
    start = start_digests(ctx.ledger, recipe, kind, ctx.device, cache)
    if start["params"] != proof["start"]["params"]:
        what = "adapters are not the ones its seed initialises" if kind.trains_adapters else \
            f"weights are not version {proof['start']['version']}'s"
        return f"retrain: its chain does not start where its recipe says: its first state's {what}"
    if proof["start"]["opt"] == EMPTY and start["opt"] != EMPTY:  # (never: a fresh AdamW holds nothing)
        return "retrain: its chain's first optimizer state is not a fresh one"
    return None


def _segment(ctx, adm, kind, plan, i: int, deadline: float, cache, record: dict, cand, clock=None):
    """Replay segment i; (a mismatch reason or None, the train's return when it is the final segment, the
    distance across classes)."""
    recipe, proof = adm.meta["recipe"], adm.meta["recipe"]["proof"]
    steps, last_seg = recipe["steps"], len(proof["links"]) - 2
    first, last = segment_bounds(proof, steps, i)
    state, meta = fetch_state(ctx.ledger, plan.pins[i], plan.bound, f"segment {i}'s start", trusted=True)
    served = [f for f in (meta.get("fingerprints") or "").split(",") if f]
    residual = {k[len("residual/"):]: v for k, v in state.items() if k.startswith("residual/")}
    data = None
    if plan.private:  # the batches its participant served, sealed to this validator, at their positions
        samples = samples_of(ctx, adm, plan.pins[f"samples:{i}"], i)
        data = workload_for(ctx.ledger, recipe).sample_data(int(recipe["data"]["bytes"]), samples)
    hook, out = replay_segment(ctx.ledger, recipe, kind, {k: v for k, v in state.items()
                                                         if not k.startswith("residual/")},
                               first, last, ctx.device, deadline, keep_end=plan.ends, cache=cache, train_data=data,
                               clock=clock)
    if plan.ends:
        end, _ = fetch_state(ctx.ledger, plan.pins[f"end:{i}"], plan.bound, f"segment {i}'s end", trusted=True)
        pick = [k for k in end if k.startswith("params/")]
        dist = relative_distance({k: hook.end_state[k] for k in pick}, {k: end[k] for k in pick},
                                 {k: state[k] for k in pick})
        tol = ctx.ledger.config.validators.retrain_tolerance
        if not dist <= tol:
            return _mismatch(cand, record, (
                f"retrain: steps {first + 1}-{last} of {steps} (segment {i}) replay {dist:.3g} (relative) from its "
                f"served end on this validator's device class, over validators.retrain_tolerance {tol:g}"),
                segment=i), None, dist
    elif state_digest(hook.end) != proof["links"][i + 1][0]:
        at = _first_difference(served, hook.fingerprints)
        if at is not None:
            return _mismatch(cand, record, (
                f"retrain: step {first + at + 1} of {steps} does not replay (segment {i}, steps {first + 1}-{last}): "
                "its loss and gradient norm are not the committed ones"), segment=i, step=first + at + 1), None, 0.0
        return _mismatch(cand, record, (
            f"retrain: the state after step {last} of {steps} does not replay (segment {i}, steps {first + 1}-{last}): "
            "every step's loss and gradient norm agree, the state does not"), segment=i, step=last), None, 0.0
    return None, (out, residual) if i == last_seg else None, 0.0


def _bits_equal(a, b) -> bool:
    """The same dtype, shape and bytes (-0.0 is not 0.0 here: the file's bytes are what was signed)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _delta_matches(ctx, adm, kind, out, residual: dict, cache, ends: bool) -> str | None:
    """Why the final segment's end does not give the submitted delta, or None."""
    recipe, proof = adm.meta["recipe"], adm.meta["recipe"]["proof"]
    base = ctx.ledger.load_weights(adm.base)
    d = Derivation(base=base, shift=final_shift(ctx.ledger, recipe, cache), residual_in=residual or None,
                   declared=adm.meta["delta"])
    derived, residual_out = kind.proof_derive(out, d)
    path = ctx.ledger.store.cache_path(adm.pointer.md5)
    if not path.is_file():  # read from storage without a copy in the cache (validator/delta_load.py)
        path = ctx.ledger.store.fetch_object(adm.pointer, max_bytes=ctx.ledger.config.limits.max_delta_bytes)
    submitted = load_checked(path, ctx.ledger.config.limits, label="delta", finite=False)
    if ends:
        zero = {k: v.float() * 0 for k, v in submitted.items()}
        tol = ctx.ledger.config.validators.retrain_tolerance
        dist = relative_distance({k: v.float() for k, v in derived.items()},
                                 {k: v.float() for k, v in submitted.items()}, zero)
        return None if dist <= tol else (f"retrain: its final segment gives a delta {dist:.3g} (relative) from the "
                                         f"submitted one, over validators.retrain_tolerance {tol:g}")
    same = sorted(derived) == sorted(submitted) and all(_bits_equal(derived[k], submitted[k]) for k in derived)
    if not same:
        return "retrain: its chain does not end at its delta: its final state gives another delta than it submitted"
    if proof["end"].get("residual_out") is not None and residual_out != proof["end"]["residual_out"]:
        return "retrain: its final state leaves another compression residual than the one its chain commits to"
    return None


def audit(ctx, adm, cand, draw: float, clock=None) -> str | None:
    """Replay the drawn PR's planned segments and its delta; the reason it is refused, or None (matched).
    ``cand``: the candidate record (validator/candidate.py) whose ``retrain`` and ``flags`` it fills; ``clock``:
    ticked at every replayed step (core/retrain_speed.py Clock)."""
    plan, cfg = adm.audit.plan, ctx.ledger.config
    recipe = adm.meta["recipe"]
    kind = kind_for(adm.meta["delta"])
    limit = cfg.limits.max_retrain_seconds
    t0, cache, worst = time.perf_counter(), {}, 0.0
    record = {"draw": round(draw, 6), "segments": plan.segments, "of": recipe["steps"],
              "class": "other" if plan.ends else "same"}
    deadline = time.monotonic() + limit
    try:
        reason = _start(ctx, adm, kind, cache)
        if reason:
            return _mismatch(cand, record, reason)
        final = None
        for i in plan.segments:
            reason, got, dist = _segment(ctx, adm, kind, plan, i, deadline, cache, record, cand, clock)
            worst = max(worst, dist)
            if reason:
                return reason
            final = got or final
        reason = _delta_matches(ctx, adm, kind, *final, cache, plan.ends)
        if reason:
            return _mismatch(cand, record, reason)
    except ReplayTimeout as exc:
        cand.retrain = {**record, "retrain": "timed out", "seconds": round(time.perf_counter() - t0, 3)}
        return f"retrain: replaying its audited segments ran past limits.max_retrain_seconds {limit:g} ({exc})"
    except Rejected as exc:
        cand.retrain = {**record, "retrain": "failed"}
        return exc.message
    except Exception as exc:  # noqa: BLE001 - one PR's proof never stops the queue: it gets one verdict
        cand.retrain = {**record, "retrain": "failed"}
        log.info("%s: replay failed: %s: %s", adm.meta["id"], type(exc).__name__, exc)
        return f"retrain: its proof could not be replayed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    steps = sum(b - a for a, b in (segment_bounds(recipe["proof"], recipe["steps"], i) for i in plan.segments))
    cand.retrain = {**record, "retrain": "matched", "steps": steps,
                       "seconds": round(time.perf_counter() - t0, 3),
                       **({"distance": worst if math.isfinite(worst) else -1.0} if plan.ends else {})}
    return None
