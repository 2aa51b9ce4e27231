"""A participant's recipe: what `train` declares about how it trained, and what `submit` sends with it.

Usage (from participant/train.py and submit.py):
    record["recipe"] = declare(ledger, wl, head, data, steps, seed, device, summary, extra, who, task, lora)
    record = publish(record, transform=None)       # what makes the delta not the training's alone, said

The recipe's format and rules are woolf/protocol/recipe.py; its proof of training (the chain `train`
records, participant/proof.py) is audited by validators (woolf/validator/audit_proof.py). Carried
optimizer state is never uploaded: an audit asks for the states it needs (docs/protocol.md#state-on-
demand-challenge-and-answer).
"""

from __future__ import annotations

from woolf.ledger.recipes import libraries
from woolf.protocol.recipe import FRESH, PRIVATE, make_recipe, shard_data


def declare(ledger, wl, head, data, steps: int, seed: int, device: str, summary: dict, extra: dict,
            who: str, task: str | None, lora=None) -> dict:
    """The recipe of a run of ``wl.train`` (or of its LoRA trainer, ``lora`` its spec): ``data`` is what
    `train` was given (None: the contributor's shard, ("shard", owner, version): a taken task's, a path:
    private)."""
    if isinstance(data, tuple):
        declared = shard_data(data[1], data[2], task)
    elif data:
        declared = dict(PRIVATE)
    else:
        declared = shard_data(who, head.version)
    carried = str(summary.get("optimizer", "")).startswith("resumed")
    optimizer = {"start": "carried"} if carried else dict(FRESH)
    summary_lora = summary.get("lora") or {}
    if isinstance(summary_lora.get("start"), dict):  # a LoRA run: its adapters' start (participant/lora_state.py)
        optimizer = dict(summary_lora["start"])
    cfg = ledger.config
    recipe = make_recipe(base_version=head.version, base_commit=head.commit, data=declared, seed=seed, steps=steps,
                         workload=cfg.workload.name, params=cfg.workload.params,
                         batch=getattr(wl, "batch_size", None), lr=getattr(wl, "lr", None),
                         global_step=int(extra.get("global_step", 0)), optimizer=optimizer,
                         device="cuda" if str(device).startswith("cuda") else str(device),
                         libraries=libraries(), seconds=summary.get("seconds"),
                         follow=int(summary.get("followed") or 0))
    if summary_lora.get("recipe"):
        recipe["lora"] = summary_lora["recipe"]  # every field of the spec, defaults spelled out
    elif lora is not None:
        recipe["lora"] = lora.text()
    return recipe


def publish(record: dict, transform: str | None = None) -> dict:
    """``record`` with its recipe ready to send; ``transform`` says the delta sent is not a function of the
    training alone (error feedback of unmerged earlier PRs)."""
    recipe = record.get("recipe")
    if not recipe or not transform:
        return record
    return {**record, "recipe": {**recipe, "transform": transform}}

