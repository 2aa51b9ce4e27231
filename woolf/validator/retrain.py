"""Proof of training: a validator re-trains a drawn share of PRs from the recipe each declares, and compares.

Usage (two stages of the validator's evaluation, validator/stages.py: "recipe" after admission, and
"retrain" after scoring, before the merge and the benchmark; over the validator's context):
    reason = recipe_reason(ctx, adm)          # None, or "recipe: ..." / "retrain: ..."
    reason = retrain_check(ctx, cand)         # None, or "retrain: ..."; fills the candidate record's
    cand.retrain        # {"retrain": "matched", "distance": 3e-8, "tolerance": 0.02, "seconds": .., ...}

The estimate of a re-training's time uses what this validator measured (``ctx.state.speed``).

What happens to a PR (docs/protocol.md#re-training):
- a recipe that breaks a rule (woolf/protocol/recipe.py check_recipe: a shard not assigned to the
  contributor, a base other than the PR's parent, steps or batch over the ledger's limits, an unknown
  workload parameter), or, when the ledger re-trains, one estimated over `limits.max_retrain_seconds`:
  rejected, "recipe: ...";
- a PR that cannot be re-trained (private data, no recipe, a transformed delta): rejected when
  `policy.require_retrain` is on, else recorded as "unverifiable";
- otherwise drawn with probability `validators.retrain_rate` from the hub's receipt of the PR and a salt
  only validators hold (protocol/recipe.py retrain_draw); a drawn PR is re-trained from its base
  version's weights, its declared shard, seed, steps, parameters and optimizer start, and the delta
  compared with the submitted one: |retrained - submitted| / |submitted| over
  `validators.retrain_tolerance` rejects it ("retrain: ...") and flags the contributor
  ("retrain-failed" in Woolf-Flags: `woolf leaderboard` counts it); a match is recorded.
- a re-training that crashes or runs past `limits.max_retrain_seconds` ends in one verdict
  ("retrain: ..."); it never stops the queue.

"Re-training" is not "replay" (a delta repeating merged content, woolf/validator/screen.py).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from woolf.core.retrain_speed import Clock
from woolf.errors import IntegrityError, Rejected, StorageError, WoolfError
from woolf.ledger.benchmark import hidden_benchmark
from woolf.ledger.tasks import fetch_tasks
from woolf.protocol import layout
from woolf.protocol.receipts import receipt_commit
from woolf.protocol.recipe import (
    RETRAIN_FLAG,
    RecipeLimits,
    check_recipe,
    relative_distance,
    retrain_draw,
    unverifiable,
)
from woolf.protocol.tasks import read_tasks
from woolf.storage.files import hashes_of_file
from woolf.storage.kinds import kind_for
from woolf.storage.pointer import Pointer
from woolf.workloads.features import BIND, GLOBAL_STEP, STATE_DIR, features_of

log = logging.getLogger("woolf.validator")

FLAG = RETRAIN_FLAG  # Woolf-Flags mark of a PR whose re-training did not match


class RetrainTimeout(Exception):
    """Raised from the training loop's progress callback past the deadline."""


def recipe_reason(ctx, adm) -> str | None:
    """Before any weights are read: why ``adm``'s recipe is refused ("recipe: ..."), or why a PR that
    cannot be re-trained is refused under policy.require_retrain ("retrain: ..."); None when neither."""
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
    why = unverifiable(recipe) or kind_for(adm.meta["delta"]).unreplayable()
    if why and cfg.policy.require_retrain:
        return f"retrain: this PR cannot be re-trained ({why}) and the ledger's policy.require_retrain is on"
    if why or cfg.validators.retrain_rate <= 0:
        return None
    limit, wl = cfg.limits.max_retrain_seconds, ledger.workload()
    est = ctx.state.speed.over(recipe, wl, _fingerprint(wl), limit)  # never on an estimate alone: core/retrain_speed.py
    if est is not None:
        return (f"recipe: re-training its {recipe['steps']} steps would take about {est:.0f} s, over the "
                f"ledger's limits.max_retrain_seconds {limit:g}")
    return None


def retrain_check(ctx, cand) -> str | None:
    """After recipe_reason passed and the delta's checks and scores: with probability
    validators.retrain_rate, re-train and compare. The reason the candidate ``cand``'s PR is refused
    ("retrain: ..."), or None; fills cand.retrain (and flags a mismatch)."""
    ledger, adm = ctx.ledger, cand.adm
    cfg = ledger.config
    recipe, rate = adm.meta.get("recipe"), cfg.validators.retrain_rate
    if rate <= 0:
        return None
    why = unverifiable(recipe) or kind_for(adm.meta["delta"]).unreplayable()
    if why:
        cand.retrain = {"retrain": "unverifiable", "why": why}
        return None
    receipt = receipt_commit(ledger.git, adm.meta["id"])  # the hub's receipt log (protocol/receipts.py)
    draw = retrain_draw(receipt or cand.pr.head or "", adm.meta["id"], salt(ledger))
    if draw >= rate:
        cand.retrain = {"retrain": "not drawn", "draw": round(draw, 6)}
        return None
    return _retrain_and_compare(ctx, cand, recipe, draw, _fingerprint(ledger.workload()))


def _retrain_and_compare(ctx, cand, recipe, draw, fingerprint) -> str | None:
    cfg, adm = ctx.ledger.config, cand.adm
    limit, tol = cfg.limits.max_retrain_seconds, cfg.validators.retrain_tolerance
    t0 = time.perf_counter()
    record = {"draw": round(draw, 6), "tolerance": tol, "trained_seconds": recipe.get("seconds")}
    clock = Clock()
    try:
        retrained = retrain(ctx.ledger, recipe, adm.base, ctx.device, limit, clock)
    except RetrainTimeout as exc:
        cand.retrain = {**record, "retrain": "timed out", "seconds": round(time.perf_counter() - t0, 3)}
        return (f"retrain: re-training its recipe ran past limits.max_retrain_seconds {limit:g} ({exc}); "
                "declare fewer steps")
    except Rejected as exc:
        cand.retrain = {**record, "retrain": "failed"}
        return exc.message
    except Exception as exc:  # noqa: BLE001 - one PR's recipe never stops the queue: it gets one verdict
        cand.retrain = {**record, "retrain": "failed"}
        log.info("%s: re-training failed: %s: %s", adm.meta["id"], type(exc).__name__, exc)
        return f"retrain: its recipe could not be re-trained ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    seconds = time.perf_counter() - t0
    ctx.state.speed.record(fingerprint, adm.meta["contributor"], recipe, ctx.ledger.workload(), clock)
    clip = adm.screened.clip if adm.screened is not None and adm.screened.clip else 1.0
    dist = distance(retrained, cand.delta, clip)
    record.update(distance=dist if math.isfinite(dist) else -1.0, seconds=round(seconds, 3))
    if dist <= tol:
        cand.retrain = {**record, "retrain": "matched"}
        return None
    cand.retrain = {**record, "retrain": "mismatch"}
    if FLAG not in cand.flags:
        cand.flags.append(FLAG)
    shown = f"{dist:.3g}" if math.isfinite(dist) else "incomparable (other tensors)"
    return (f"retrain: the delta is {shown} (relative distance) from a re-training of its own recipe, over "
            f"validators.retrain_tolerance {tol:g}: it was not trained as its recipe declares")


def distance(retrained: dict, delta, clip: float = 1.0) -> float:
    """|clip * retrained - delta| / |delta|, float64-accumulated (inf when the tensors differ in names or
    shapes). ``clip``: the factor the validator scaled the submitted delta by (scoring.norm_action = clip)."""
    import torch  # deferred: torch

    keys = sorted(retrained)
    have = sorted(delta.keys()) if hasattr(delta, "keys") else sorted(delta)
    if keys != have:
        return math.inf
    sq_diff = sq_norm = 0.0
    for k in keys:
        d = delta[k].to(torch.float64)
        r = retrained[k].to(torch.float64) * clip
        if r.shape != d.shape:
            return math.inf
        sq_diff += float(((r - d) ** 2).sum())
        sq_norm += float((d ** 2).sum())
    return relative_distance(sq_diff, sq_norm)


def retrain(ledger, recipe: dict, base_version, device: str, limit: float, clock: Clock | None = None) -> dict:
    """The delta ``recipe`` gives from ``base_version``'s weights: float32 trained - base, as `submit` makes
    it. Raises RetrainTimeout past ``limit`` seconds, Rejected for a recipe its workload contradicts."""
    import torch  # deferred: torch

    from woolf.workloads.base import load_workload  # deferred: loads torch

    cfg = ledger.config
    wl = load_workload(replace(cfg.workload, params=recipe["params"]))  # the ledger's workload, never the recipe's
    feats = features_of(wl)
    if BIND in feats:
        wl.bind(lambda rel: ledger.git.show_bytes(f"{ledger.main_ref}:{rel}"))
    for key, attr in (("batch", "batch_size"), ("lr", "lr")):
        if recipe.get(key) is not None and getattr(wl, attr, recipe[key]) != recipe[key]:
            raise Rejected(f"recipe: its {key} {recipe[key]!r} is not what its params give ({getattr(wl, attr)!r})")
    base = ledger.load_weights(base_version)
    data = recipe["data"]
    train_data = wl.default_data(data["owner"], data["version"])
    deadline = time.monotonic() + limit

    def progress(step: int, total: int, loss: float) -> None:
        if clock is not None:
            clock.tick()
        if time.monotonic() > deadline:
            raise RetrainTimeout(f"stopped at step {step} of {total}")

    extra: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        if STATE_DIR in feats:
            extra["state_dir"] = Path(tmp) / "optimizer"
        if recipe["optimizer"]["start"] == "carried":
            if STATE_DIR not in feats:
                raise Rejected("recipe: it declares a carried optimizer state, and its workload keeps none")
            place_start(ledger, recipe["optimizer"], extra["state_dir"])
        if GLOBAL_STEP in feats:
            extra["global_step"] = recipe["global_step"]
        torch.manual_seed(recipe["seed"])
        trained, summary = wl.train(base, train_data, recipe["steps"], device=device, seed=recipe["seed"],
                                    progress=progress, **extra)
    how = str((summary or {}).get("optimizer", ""))
    if recipe["optimizer"]["start"] == "carried" and not how.startswith("resumed"):  # never silently fresh
        raise Rejected(f"retrain: its carried optimizer state did not load here ({how[:200]}); a re-training "
                       "from a fresh one would not be its recipe")
    return {k: trained[k].to(torch.float32) - base[k].to(torch.float32) for k in trained}


def place_start(ledger, opt: dict, state_dir: Path) -> None:
    """The carried optimizer state the recipe pins, from storage into ``state_dir``, its sha256 checked."""
    from woolf.workloads.optstate import FILE  # deferred: loads torch

    try:
        path = ledger.store.fetch_object(Pointer(opt["md5"], opt["size"], "optimizer.safetensors"),
                                         max_bytes=ledger.config.limits.max_delta_bytes)
    except (StorageError, IntegrityError) as exc:
        raise Rejected(f"retrain: its carried optimizer state is unavailable in storage "
                       f"({exc.message[:200]})") from None
    if hashes_of_file(Path(path))[1] != opt["sha256"]:
        raise Rejected("retrain: its carried optimizer state does not hash to the sha256 its recipe pins")
    state_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, state_dir / FILE)


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
