"""A participant's recipe: what `train` declares about how it trained, and what `submit` sends with it.

Usage (from participant/train.py and submit.py):
    start = snapshot_start(ledger, out)            # the optimizer state this run starts from, or None
    record["recipe"] = declare(ledger, wl, head, data, steps, seed, device, summary, extra, start)
    record = publish(ledger, record, transform=None, remote=None)  # carried state uploaded, pinned in the recipe

The recipe's format and rules are woolf/protocol/recipe.py; validators re-train from it
(woolf/validator/retrain.py). Carried optimizer state (docs/protocol.md#carried-optimizer-state): the
state file a run starts from is copied aside before training, then uploaded to the ledger's storage
with the PR and pinned in the recipe by sha256, md5 and size, so that a validator can start from it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from woolf.ledger.recipes import libraries
from woolf.protocol.recipe import FRESH, PRIVATE, make_recipe, shard_data
from woolf.storage.dvcstore import REMOTE_NAME
from woolf.storage.files import hashes_of_file

START = "start-optimizer.safetensors"  # in .woolf/work: the optimizer state the last `train` started from


def snapshot_start(ledger, out: Path, state: Path | None) -> Path | None:
    """Copy the optimizer state file a run is about to start from (``state``: its folder) to ``out``."""
    from woolf.workloads.optstate import FILE  # deferred: loads torch

    (out / START).unlink(missing_ok=True)
    src = state / FILE if state is not None else None
    if src is None or not src.exists():
        return None
    shutil.copyfile(src, out / START)
    return out / START


def declare(ledger, wl, head, data, steps: int, seed: int, device: str, summary: dict, extra: dict,
            start: Path | None, who: str, task: str | None) -> dict:
    """The recipe of a run of ``wl.train``: ``data`` is what `train` was given (None: the contributor's
    shard, ("shard", owner, version): a taken task's, a path: private)."""
    if isinstance(data, tuple):
        declared = shard_data(data[1], data[2], task)
    elif data:
        declared = dict(PRIVATE)
    else:
        declared = shard_data(who, head.version)
    carried = start is not None and str(summary.get("optimizer", "")).startswith("resumed")
    optimizer = {"start": "carried", "path": str(start)} if carried else dict(FRESH)
    lora = summary.get("lora") or {}
    if isinstance(lora.get("start"), dict):  # a LoRA run: its adapters' start (participant/lora_state.py)
        optimizer = dict(lora["start"])
    cfg = ledger.config
    recipe = make_recipe(base_version=head.version, base_commit=head.commit, data=declared, seed=seed, steps=steps,
                       workload=cfg.workload.name, params=cfg.workload.params,
                       batch=getattr(wl, "batch_size", None), lr=getattr(wl, "lr", None),
                       global_step=int(extra.get("global_step", 0)), optimizer=optimizer,
                       device="cuda" if str(device).startswith("cuda") else str(device),
                       libraries=libraries(), seconds=summary.get("seconds"),
                       follow=int(summary.get("followed") or 0))
    if lora.get("recipe"):
        recipe["lora"] = lora["recipe"]  # every field of the spec, defaults spelled out
    return recipe


def publish(ledger, record: dict, transform: str | None = None, remote: str | None = None) -> dict:
    """``record`` with its recipe ready to send: a carried starting state uploaded (hashed, pinned by
    sha256/md5/size; its bytes are the cost, docs/protocol.md); ``transform`` says the delta sent is not
    the trained one (error feedback, top-k)."""
    recipe = record.get("recipe")
    if not recipe:
        return record
    recipe = dict(recipe)
    opt = dict(recipe.get("optimizer") or FRESH)
    if opt.get("start") == "carried" and "path" in opt:  # (a recipe given pinned already is sent as it is)
        path = Path(opt.pop("path"))
        if not path.is_file():  # the snapshot is gone: the recipe cannot name its start
            opt = dict(FRESH, lost="the starting optimizer state was not kept")
            recipe["transform"] = "carried optimizer state lost"
        else:
            md5, sha = hashes_of_file(path)
            size = path.stat().st_size
            sent = path.with_name(f"{path.name}.{sha[:12]}.outgoing")
            shutil.copyfile(path, sent)  # put() consumes its file: the snapshot stays until submitted
            ledger.store.put(sent, "optimizer.safetensors", md5=md5, sha256=sha, remote=remote or REMOTE_NAME)
            opt.update(sha256=sha, md5=md5, size=size)
    recipe["optimizer"] = opt
    if transform:
        recipe["transform"] = transform
    return {**record, "recipe": recipe}

