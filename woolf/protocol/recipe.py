"""A PR's recipe: how its delta was trained, declared in its signed submission.json; and the re-training draw.

Usage:
    recipe = make_recipe(base_version=3, base_commit=c, data=shard_data("alice", 3), seed=7, steps=60,
                         workload="charlm", params={}, batch=16, lr=3e-3, global_step=180,
                         optimizer=FRESH, device="cpu", libraries={"torch": "2.13"}, seconds=4.2)
    reason = check_recipe(recipe, contributor="alice", base_version=3, limits=RecipeLimits(10_000, 4096),
                          known_params={"lr", "batch_size"}, taken=None)   # None, or "recipe: ..."
    why = unverifiable(recipe)     # None: its recipe can be re-trained; else why not (private data, ...)
    x = retrain_draw(receipt_commit, pr_id, salt)    # a number in [0, 1): re-trained when x < retrain_rate
    d = relative_distance(sq_diff, sq_norm)          # |retrained - submitted| / |submitted|

The recipe (docs/protocol.md#recipe) names the base version, the data (the ledger's deterministic
assignment: the shard of (owner, version), its sample order drawn from the seed; or "private" for
`woolf train --data PATH`), seed, steps, batch, learning rate, the workload and every parameter it
was built with, the ledger's global step (LR schedules), the optimizer's starting point ("fresh", or
"carried": the starting state uploaded with the PR, pinned by sha256, md5 and size), the device class
and library versions, and the seconds the training took. It lives in submission.json, which is in
the PR's head commit: a contributor's signature covers it.

"Re-training" (this module, woolf/validator/retrain.py) is distinct from "replay" (a delta whose
bytes repeat merged content, woolf/validator/screen.py): reasons about it begin `retrain:` and
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
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_HEX32 = re.compile(r"^[0-9a-f]{32}\Z")
_OWNER = re.compile(r"^[^\x00-\x1f]{1,128}\Z")
MAX_PARAMS = 64  # workload parameters one recipe may name
RETRAIN_PREFIX = "retrain:"  # every reason a PR is refused for its re-training begins so
RETRAIN_FLAG = "retrain-failed"  # the Woolf-Flags mark of a PR whose re-training did not match its delta
TOLERANCE = 0.02  # validators.retrain_tolerance's default: see docs/protocol.md#re-training (calibration)


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
    if not isinstance(o, dict) or o.get("start") not in ("fresh", "carried"):
        return "optimizer must be {start: fresh} or {start: carried, sha256, md5, size}"
    if o["start"] == "carried" and not (isinstance(o.get("sha256"), str) and _HEX64.match(o["sha256"])
                                        and isinstance(o.get("md5"), str) and _HEX32.match(o["md5"])
                                        and _int(o.get("size")) and o["size"] > 0):
        return "a carried optimizer state is pinned by its sha256, md5 and size"
    if not _int(r.get("follow", 0)):
        return "follow must be an integer"
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
    """Why a PR cannot be re-trained (its delta is not a function of its recipe alone), or None. Whether
    re-training can compare its delta's kind is the kind's to say (storage/kinds/ ``unreplayable``)."""
    if recipe is None:
        return "no recipe declared"
    if recipe["data"]["kind"] == "private":
        return "private data (woolf train --data PATH)"
    if recipe.get("follow"):
        return "it followed main's newer versions while training (workload.follow_every)"
    if recipe.get("transform"):
        return f"its delta was transformed after training ({recipe['transform']})"
    return None


def retrain_draw(receipt: str, pr_id: str, salt: bytes) -> float:
    """A number in [0, 1) from the hub's receipt of the PR (its commit id: the hub's clock is in it), the
    PR id and a salt only validators hold: the submitter cannot know it before its PR is in the hub."""
    h = hashlib.sha256(b"woolf-retrain\0" + receipt.encode() + b"\0" + pr_id.encode() + b"\0"
                       + hashlib.sha256(salt).digest())
    return int.from_bytes(h.digest()[:8], "big") / 2.0**64


def relative_distance(sq_diff: float, sq_norm: float) -> float:
    """|retrained - submitted| / |submitted| from the two squared sums (inf when the submitted delta is 0)."""
    if sq_norm <= 0:
        return math.inf
    return math.sqrt(max(sq_diff, 0.0) / sq_norm)
