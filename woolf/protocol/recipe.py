"""A PR's recipe: how its delta was trained, declared in its signed submission.json; and the audit draw.

Usage:
    recipe = make_recipe(base_version=3, base_commit=c, data=shard_data("alice", 3), seed=7, steps=60,
                         workload="charlm", params={}, batch=16, lr=3e-3, global_step=180,
                         optimizer=FRESH, device="cpu", libraries={"torch": "2.13"}, seconds=4.2)
    reason = check_recipe(recipe, contributor="alice", base_version=3, limits=RecipeLimits(10_000, 4096),
                          known_params={"lr", "batch_size"}, taken=None)   # None, or "recipe: ..."
    why = unverifiable(recipe)                        # None: auditable; else why not (no proof, private data, ...)
    x = retrain_draw(receipt_commit, pr_id, salt)    # a number in [0, 1): audited when x < retrain_rate
    d = relative_distance(sq_diff, sq_norm)          # |replayed - served| / |moved|, across device classes

The recipe (docs/protocol.md#recipes-and-proof-of-training) names the base version, the data (the
ledger's deterministic assignment: the shard of (owner, version), its sample order drawn from the
seed; or "private" for `woolf train --data PATH`), seed, steps, batch, learning rate, the workload
and every parameter it was built with, the ledger's global step (LR schedules), whether the
optimizer started fresh or carried over, the processes, the LoRA spec, the device and library
versions, the seconds the training took, and its proof of training (woolf/protocol/proof.py: a
chain of state digests ending at the delta). It lives in submission.json, which is in the PR's
head commit: a contributor's signature covers it.

An audit (woolf/validator/audit_proof.py) is distinct from "replay" in the screen's sense (a delta
whose bytes repeat merged content, woolf/validator/screen.py): reasons about it begin `retrain:` and
`recipe:`, never `replay:`.

Standard library only (protocol/ is L2).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

SCHEMA = 1
FRESH = {"start": "fresh"}
PRIVATE = {"kind": "private"}
_OWNER = re.compile(r"^[^\x00-\x1f]{1,128}\Z")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
MAX_PARAMS = 64  # workload parameters one recipe may name
RETRAIN_PREFIX = "retrain:"  # every reason a PR is refused for its re-training begins so
RETRAIN_FLAG = "retrain-failed"  # the Woolf-Flags mark of a PR whose audit did not replay
TOLERANCE = 0.02  # validators.retrain_tolerance's default: across device classes only (docs/protocol.md)


@dataclass(frozen=True)
class RecipeLimits:
    max_steps: int  # workload.max_steps
    max_batch: int  # limits.max_batch


def shard_data(owner: str, version: int, task: str | None = None) -> dict:
    """The ledger's assignment: the shard of (owner, version), samples drawn in the order the seed gives;
    ``task``: the expired task whose shard this is (`woolf train --take`)."""
    out = {"kind": "shard", "owner": owner, "version": version, "order": "seed"}
    if task:
        out["task"] = task
    return out


def make_recipe(*, base_version: int, base_commit: str, data: dict, seed: int, steps: int, workload: str,
                params: dict, batch: int | None, lr: float | None, global_step: int, optimizer: dict,
                device: str, libraries: dict, seconds: float | None = None, follow: int = 0) -> dict:
    """The recipe as submission.json carries it (plain JSON)."""
    return {"schema": SCHEMA, "base_version": base_version, "base_commit": base_commit, "data": data,
            "seed": seed, "steps": steps, "batch": batch, "lr": lr, "global_step": global_step,
            "workload": workload, "params": dict(params), "optimizer": optimizer, "device": device,
            "libraries": dict(libraries), "seconds": seconds, "follow": follow}


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _shape(r) -> str | None:
    """What is malformed in ``r``, or None."""
    if not isinstance(r, dict) or r.get("schema") != SCHEMA:
        return f"schema must be {SCHEMA}"
    for key in ("base_version", "seed", "steps", "global_step"):
        if not _int(r.get(key)) or r[key] < 0:
            return f"{key} must be an integer >= 0"
    if r["steps"] < 1:
        return "steps must be at least 1"
    if r.get("batch") is not None and (not _int(r["batch"]) or r["batch"] < 1):
        return "batch must be an integer >= 1"
    if r.get("lr") is not None and not (isinstance(r["lr"], (int, float)) and math.isfinite(r["lr"])):
        return "lr must be a finite number"
    if not isinstance(r.get("params"), dict) or len(r["params"]) > MAX_PARAMS:
        return f"params must be a table of at most {MAX_PARAMS} entries"
    if not isinstance(r.get("workload"), str) or not isinstance(r.get("device"), str):
        return "workload and device must be strings"
    return _shape_parts(r)


def _shape_parts(r: dict) -> str | None:
    d, o = r.get("data"), r.get("optimizer")
    if not isinstance(d, dict) or d.get("kind") not in ("shard", "private"):
        return "data must be {kind: shard, owner, version} or {kind: private}"
    if d["kind"] == "shard" and (not isinstance(d.get("owner"), str) or not _OWNER.match(d["owner"])
                                 or not _int(d.get("version"))):
        return "a shard names its owner and version"
    if d["kind"] == "private" and ("bytes" in d or "sha256" in d) and not (
            _int(d.get("bytes")) and d["bytes"] > 0 and isinstance(d.get("sha256"), str) and _HEX64.match(d["sha256"])):
        return "private data commits to its sha256 and its size in bytes"
    if not isinstance(o, dict) or o.get("start") not in ("fresh", "carried"):
        return "optimizer must be {start: fresh} or {start: carried}"
    if not _int(r.get("follow", 0)):
        return "follow must be an integer"
    if not _int(r.get("nproc", 1)) or not 1 <= r.get("nproc", 1) <= 4096:
        return "nproc must be an integer in [1, 4096]"
    if r.get("lora") is not None and (not isinstance(r["lora"], str) or len(r["lora"]) > 200):
        return "lora must be the adapters' spec (text)"
    return None


def check_recipe(recipe, *, contributor: str, base_version: int, limits: RecipeLimits,
                 known_params: set[str] | None, taken: tuple[str, int] | None = None,
                 workload: str | None = None) -> str | None:
    """The one-line reason a recipe is refused (beginning "recipe:"), or None.

    ``known_params``: the workload's parameter names (None: it takes any); ``taken``: the (owner,
    version) of the expired task's shard the recipe's data names, when the ledger's task records show
    this contributor took it; ``workload``: the ledger's workload name (a recipe naming another is
    refused: it would be re-trained with another workload's code)."""
    bad = _shape(recipe)
    if bad:
        return f"recipe: malformed ({bad})"
    if recipe["base_version"] != base_version:
        return (f"recipe: its base version {recipe['base_version']} is not the PR's parent, version "
                f"{base_version}")
    data = recipe["data"]
    if data["kind"] == "shard":
        shard = (data["owner"], data["version"])
        followed = recipe.get("follow") and data["owner"] == contributor and data["version"] <= base_version
        if shard != (contributor, base_version) and shard != taken and not followed:
            return (f"recipe: shard {data['owner']}@v{data['version']} was not assigned to {contributor} "
                    f"(its shard for this PR is {contributor}@v{base_version})")
    if workload is not None and recipe["workload"] != workload:
        return f"recipe: workload {recipe['workload'][:80]!r} is not the ledger's {workload!r}"
    if recipe["steps"] > limits.max_steps:
        return f"recipe: {recipe['steps']} steps, over the ledger's workload.max_steps {limits.max_steps}"
    return _batch_problem(recipe, limits) or _params_problem(recipe, known_params)


def _batch_problem(recipe: dict, limits: RecipeLimits) -> str | None:
    """A batch over limits.max_batch, whether the recipe says it as ``batch`` or through its parameters
    (``params.batch_size``, times ``params.grad_accum`` micro-batches: the samples of one step): a recipe's
    parameters never override the ledger's limits."""
    params = recipe["params"]
    for key in ("batch_size", "grad_accum"):
        if key in params and (not _int(params[key]) or params[key] < 1):
            return f"recipe: params.{key} must be an integer >= 1"
    if recipe.get("batch") is not None and recipe["batch"] > limits.max_batch:
        return f"recipe: batch {recipe['batch']}, over the ledger's limits.max_batch {limits.max_batch}"
    batch = params.get("batch_size", recipe.get("batch"))
    samples = (batch or 1) * params.get("grad_accum", 1)
    if samples > limits.max_batch:
        how = f"params.batch_size {batch}" if "batch_size" in params else f"batch {batch}"
        how += f" x params.grad_accum {params['grad_accum']}" if "grad_accum" in params else ""
        return f"recipe: {how}, over the ledger's limits.max_batch {limits.max_batch}"
    return None


def _params_problem(recipe: dict, known_params: set[str] | None) -> str | None:
    if known_params is not None:
        unknown = sorted(k for k in recipe["params"] if k not in known_params)
        if unknown:
            return f"recipe: unknown workload parameter(s) {', '.join(map(repr, unknown[:8]))}"
    return None


def unverifiable(recipe) -> str | None:
    """Why a PR's proof of training cannot be audited (its delta is not a function of a replayable
    training alone), or None. The proof's own rules are woolf/protocol/proof.py check_proof."""
    if recipe is None:
        return "no recipe declared"
    if not isinstance(recipe.get("proof"), dict):
        return "no proof of training (a recipe declared without `woolf train`'s chain)"
    if recipe["data"]["kind"] == "private" and "bytes" not in recipe["data"]:
        return "private data (woolf train --data PATH) that commits to no digest"
    if recipe.get("transform"):
        return f"its delta is not the training's alone ({recipe['transform']})"
    return None


def draw_material(receipt: str, pr_id: str, salt: bytes) -> bytes:
    """What a PR's draw is made from: the hub's receipt of the PR (its commit id: the hub's clock is in it),
    the PR id and a salt only validators hold: the submitter cannot know it before its PR is in the hub."""
    return receipt.encode() + b"\0" + pr_id.encode() + b"\0" + hashlib.sha256(salt).digest()


def retrain_draw(receipt: str, pr_id: str, salt: bytes) -> float:
    """A number in [0, 1) from draw_material: the PR is audited when it is below validators.retrain_rate."""
    h = hashlib.sha256(b"woolf-retrain\0" + draw_material(receipt, pr_id, salt))
    return int.from_bytes(h.digest()[:8], "big") / 2.0**64


def relative_distance(sq_diff: float, sq_norm: float) -> float:
    """sqrt(sq_diff / sq_norm) (inf when sq_norm is 0): how far a replay is, relative to a norm."""
    if sq_norm <= 0:
        return math.inf
    return math.sqrt(max(sq_diff, 0.0) / sq_norm)
