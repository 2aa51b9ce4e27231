"""Proof of training in the validator: a recipe's rules, and a drawn share of PRs audited by their proofs.

Usage (two stages of the validator's evaluation, validator/stages.py: "recipe" after admission, and
"retrain" after scoring, before the merge and the benchmark; over the validator's context):
    reason = recipe_reason(ctx, adm)          # None, or "recipe: ..." / "retrain: ..."; a drawn PR waits (Deferred)
    reason = retrain_check(ctx, cand)         # None, or "retrain: ..."; fills the candidate record's
    cand.retrain        # {"retrain": "matched", "segments": [3, 15], "steps": 8, "class": "same", ...}

The estimate of an audit's time uses what this validator measured (``ctx.state.speed``, per unit of work).

What happens to a PR (docs/protocol.md#recipes-and-proof-of-training):
- a recipe that breaks a rule (woolf/protocol/recipe.py check_recipe: a shard not assigned to the
  contributor, a base other than the PR's parent, steps or batch over the ledger's limits, an unknown
  workload parameter, another workload, a batch x grad_accum over limits.max_batch), or, when the ledger
  audits, one whose audited segments are estimated to replay over `limits.max_retrain_seconds` (its own
  declared seconds, pro rata, over it too: core/retrain_speed.py): rejected, "recipe: ...";
- a proof that breaks its rules (woolf/protocol/proof.py check_proof: not covering the declared steps,
  not ending at the delta, ...): rejected, "retrain: its proof ...", drawn or not;
- a PR that cannot be audited (no proof, private data its workload cannot sample, a carried start that
  continues no PR, a delta kind that brings no replay: storage/kinds/ ``unreplayable``): rejected when
  `policy.require_retrain` is on, else recorded as "unverifiable";
- otherwise drawn with probability `validators.retrain_rate` from the hub's receipt of the PR and a salt
  only validators hold (protocol/recipe.py retrain_draw); a drawn PR is challenged for the states of its
  audited segments and waits for them, unjudged (validator/audit_wait.py); once they are served its
  start is checked and its segments replayed (validator/audit_proof.py): a mismatch rejects it
  ("retrain: step 17 of 30 does not replay ...") and flags the contributor ("retrain-failed" in
  Woolf-Flags: `woolf leaderboard` counts it); a match is recorded.
- a replay that crashes or runs past `limits.max_retrain_seconds` ends in one verdict ("retrain: ...");
  it never stops the queue.

An audit is not "replay" in the screen's sense (a delta repeating merged content, woolf/validator/screen.py).
"""

from __future__ import annotations

import inspect
import logging
import os
import secrets
from dataclasses import dataclass

from woolf.core.retrain_speed import Clock, declared_seconds
from woolf.errors import Rejected, StorageError, WoolfError
from woolf.ledger.benchmark import hidden_benchmark
from woolf.ledger.tasks import fetch_tasks
from woolf.protocol import layout
from woolf.protocol.proof import draw_segments, segment_bounds
from woolf.protocol.receipts import receipt_commit
from woolf.protocol.recipe import (
    RETRAIN_FLAG,
    RecipeLimits,
    check_recipe,
    draw_material,
    retrain_draw,
    unverifiable,
)
from woolf.protocol.tasks import read_tasks
from woolf.storage.kinds import kind_for
from woolf.validator.audit_proof import audit, prepare, proof_problem, unproven

log = logging.getLogger("woolf.validator")

FLAG = RETRAIN_FLAG  # Woolf-Flags mark of a PR whose audit did not replay


@dataclass
class Audit:
    """A PR's proof of training as this validator's evaluation carries it from admission to the replay."""

    why: str | None = None  # why it cannot be audited (recorded "unverifiable"), or None
    draw: float | None = None  # its draw in [0, 1), once drawn for
    plan: object = None  # validator/audit_wait.py Plan: its segments and served states, once they came
    record: dict | None = None  # Woolf-Retrain of a PR refused before its replay (unanswered, a bad state)


def retrain_record(adm) -> dict | None:
    """The Woolf-Retrain record of a PR refused by recipe_reason (None when it says nothing)."""
    return adm.audit.record if isinstance(adm.audit, Audit) else None


def recipe_reason(ctx, adm) -> str | None:
    """Before any weights are read: why ``adm``'s recipe or proof is refused ("recipe: ...", "retrain: ..."),
    or why a PR that cannot be audited is refused under policy.require_retrain; None when neither.
    A drawn PR is challenged here and waits for its states (Deferred) before anything is downloaded."""
    ledger = ctx.ledger
    cfg = ledger.config
    recipe, contributor = adm.meta.get("recipe"), adm.meta["contributor"]
    if recipe is not None:
        reason = check_recipe(recipe, contributor=contributor, base_version=adm.base.version,
                              limits=RecipeLimits(cfg.workload.max_steps, cfg.limits.max_batch),
                              known_params=known_params(ledger.workload()),
                              taken=_taken(ledger, recipe, contributor), workload=cfg.workload.name)
        if reason:
            return reason
    reason = proof_problem(adm)  # a chain that does not end at its delta, ...: on every PR
    if reason:
        return reason
    rate = cfg.validators.retrain_rate
    adm.audit = audit_state = Audit()
    if rate <= 0 and not cfg.policy.require_retrain:
        return None
    audit_state.why = unverifiable(recipe) or kind_for(adm.meta["delta"]).unreplayable() or unproven(ledger, adm)
    if audit_state.why is None and not ctx.forge.carries_challenges:
        audit_state.why = "this forge cannot carry a proof's challenges"
    if audit_state.why and cfg.policy.require_retrain:
        return (f"retrain: this PR cannot be audited ({audit_state.why}) and the ledger's policy.require_retrain "
                "is on")
    if audit_state.why or rate <= 0:
        return None
    return _draw_and_prepare(ctx, adm, audit_state)


def _draw_and_prepare(ctx, adm, audit_state: Audit) -> str | None:
    ledger, cfg = ctx.ledger, ctx.ledger.config
    recipe, sub_id = adm.meta["recipe"], adm.meta["id"]
    proof = recipe["proof"]
    receipt = receipt_commit(ledger.git, sub_id) or ctx.forge.get(sub_id, fetch=False).head
    audit_state.draw = retrain_draw(receipt, sub_id, salt(ledger))
    if audit_state.draw >= cfg.validators.retrain_rate:
        return None
    material = draw_material(receipt, sub_id, salt(ledger))
    segments = draw_segments(material, len(proof["links"]) - 1, cfg.proof.segments)
    steps = sum(b - a for a, b in (segment_bounds(proof, recipe["steps"], i) for i in segments))
    limit, wl = cfg.limits.max_retrain_seconds, ledger.workload()
    est = ctx.state.speed.over(audited(recipe, steps), wl, _fingerprint(wl), limit)  # never on an estimate alone
    if est is not None:
        return (f"recipe: replaying its {steps} audited steps would take about {est:.0f} s, over the "
                f"ledger's limits.max_retrain_seconds {limit:g}")
    try:
        audit_state.plan = prepare(ctx, adm, ctx.forge.get(sub_id, fetch=False), material)  # or Deferred
    except Rejected as exc:  # past its deadline without a valid answer, or a bad state its own key served
        late = "not answered by its deadline" in exc.message
        audit_state.record = {"retrain": "unanswered" if late else "failed", "draw": round(audit_state.draw, 6),
                              "segments": segments}
        return exc.message
    return None


def audited(recipe: dict, steps: int) -> dict:
    """``recipe`` as the work of an audit that replays ``steps`` of its steps (its declared seconds pro rata):
    what the speed estimate (core/retrain_speed.py) measures and predicts."""
    declared = declared_seconds(recipe)
    share = steps / max(1, recipe["steps"])
    return {**recipe, "steps": steps, "seconds": None if declared is None else declared * share}


def retrain_check(ctx, cand) -> str | None:
    """After recipe_reason passed and the delta's checks and scores: a drawn PR's audit. The reason the
    candidate ``cand``'s PR is refused ("retrain: ..."), or None; fills cand.retrain (and flags a mismatch)."""
    ledger, adm = ctx.ledger, cand.adm
    a = adm.audit if isinstance(adm.audit, Audit) else Audit()
    if ledger.config.validators.retrain_rate <= 0:
        return None
    if a.why:
        cand.retrain = {"retrain": "unverifiable", "why": a.why}
        return None
    if a.plan is None:
        cand.retrain = {"retrain": "not drawn", "draw": round(a.draw, 6)} if a.draw is not None else None
        return None
    clock = Clock()
    reason = audit(ctx, adm, cand, a.draw, clock)
    replayed = (cand.retrain or {}).get("steps")
    if cand.retrain and cand.retrain.get("retrain") == "matched" and replayed:
        wl = ledger.workload()
        ctx.state.speed.record(_fingerprint(wl), adm.meta["contributor"], audited(adm.meta["recipe"], replayed), wl,
                               clock)
    return reason


def known_params(wl) -> set[str] | None:
    """The workload's constructor parameter names; None when it takes any (**kwargs)."""
    try:
        params = inspect.signature(type(wl).__init__).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return {n for n in params if n != "self"}


def _fingerprint(wl) -> str:
    return wl.fingerprint() if hasattr(wl, "fingerprint") else type(wl).__name__


def _taken(ledger, recipe: dict, contributor: str) -> tuple[str, int] | None:
    """(owner, version) of the expired task's shard the recipe names, when the task's record says that
    this contributor reserved it (`woolf train --take`); else None."""
    data = recipe.get("data") or {}
    task = data.get("task")
    if not isinstance(task, str):
        return None
    try:
        rec = read_tasks(ledger.git)[0].get(task)
        if rec is None:  # a validator's pass fetches main and the PRs, not the task records: fetch them once
            fetch_tasks(ledger)
            rec = read_tasks(ledger.git)[0].get(task)
    except WoolfError:
        return None
    shard = f"{data.get('owner')}@v{data.get('version')}"
    if rec is None or rec[0].contributor != contributor or rec[0].shard != shard:
        return None
    return data["owner"], data["version"]


def salt(ledger) -> bytes:
    """What only validators hold: the hidden benchmark's bytes when the ledger pins one (every validator
    draws alike), else this validator's own secret (.woolf/validator/retrain-salt, made once)."""
    if ledger.config.benchmark.hidden_sha256:
        try:
            return hidden_benchmark(ledger.config)
        except StorageError:
            pass  # scoring reports the missing file; the draw falls back to this validator's own secret
    path = ledger.root / layout.WORK / "validator" / "retrain-salt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"retrain-salt.{os.getpid()}.tmp")
        tmp.write_bytes(secrets.token_bytes(32))
        os.replace(tmp, path)
    return path.read_bytes()
