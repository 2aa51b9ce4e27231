"""A merged version's recipe and its re-training record, for `woolf show`.

Usage:
    extra = version_recipe(ledger, v)     # {"recipe": {...} | None, "retrain": {...} | None}
    recipe = fresh_recipe(ledger, base, "alice", steps=60, seed=7)   # for weights trained outside `woolf train`
    global_step(ledger, base); libraries()

The recipe is the PR's (submission.json in the version's second parent, woolf/protocol/recipe.py); the
re-training record is the version's own Woolf-Retrain trailer (woolf/validator/retrain.py). Both are read
as untrusted data: a missing or malformed one is None.
"""

from __future__ import annotations

import platform

from woolf._version import __version__
from woolf.git.repo import BlobTooLargeError
from woolf.protocol import layout
from woolf.protocol.layout import META_MAX_BYTES, META_MAX_DEPTH
from woolf.protocol.recipe import FRESH, make_recipe, shard_data
from woolf.protocol.safejson import loads_untrusted
from woolf.protocol.trailers import json_field, parse_message
from woolf.protocol.versions import read_versions


def version_recipe(ledger, v) -> dict:
    out: dict = {"recipe": None, "retrain": None}
    if not v.submission or len(v.parents) != 2:
        return out
    try:
        raw = ledger.git.show_bytes(f"{v.parents[1]}:{layout.submission_paths(v.submission)[2]}",
                                    max_bytes=META_MAX_BYTES)
        meta = loads_untrusted(raw, META_MAX_BYTES, META_MAX_DEPTH) if raw is not None else None
    except (BlobTooLargeError, ValueError):
        meta = None
    if isinstance(meta, dict) and isinstance(meta.get("recipe"), dict):
        out["recipe"] = meta["recipe"]
    retrain = json_field(parse_message(ledger.git.message(v.commit))[1], "Woolf-Retrain")
    out["retrain"] = retrain if isinstance(retrain, dict) else None
    return out


def libraries() -> dict:
    """The library versions a recipe declares."""
    import torch  # deferred: torch

    return {"torch": torch.__version__.split("+")[0], "woolf": __version__, "python": platform.python_version()}


def global_step(ledger, base) -> int:
    """The ledger's progress `woolf train` gives a workload's LR schedule at ``base`` (features.GLOBAL_STEP):
    ``workload.steps`` per merge up to ``base``. A maintainer's change version (`woolf config set`,
    `woolf signers add`) trains nothing, so it does not advance the schedule."""
    if base.version == 0:
        return 0
    merges = sum(1 for v in read_versions(ledger.git, base.commit) if v.version > 0 and v.change is None)
    return merges * ledger.config.workload.steps


def fresh_recipe(ledger, base, owner: str, steps: int, seed: int, seconds: float | None = None,
                 device: str = "cpu") -> dict:
    """The recipe of ``steps`` from ``base`` on ``owner``'s shard with a fresh optimizer, for weights
    trained outside `woolf train` (`submit(recipe=...)`; the demo's adversaries)."""
    wl = ledger.workload()
    return make_recipe(base_version=base.version, base_commit=base.commit, data=shard_data(owner, base.version),
                       seed=seed, steps=steps, workload=ledger.config.workload.name,
                       params=ledger.config.workload.params, batch=getattr(wl, "batch_size", None),
                       lr=getattr(wl, "lr", None), global_step=global_step(ledger, base), optimizer=dict(FRESH),
                       device=device, libraries=libraries(), seconds=seconds)
