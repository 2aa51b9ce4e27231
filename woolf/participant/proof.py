"""A participant's proof of training: the recorder `train` hands its workload, and the end `submit` binds.

Usage (from participant/train.py and submit.py):
    hook = recorder(ledger, features, steps, out, follower, lead)   # None: this workload records no chain
    recipe["proof"] = draft(ledger, hook, start_version, device)    # after training: links, start, follow
    sealed = seal(recipe, delta_sha256, residual_in, residual_out, carried)   # submit: bound to the delta
    keep_run(ledger, sub_id, sealed, residual_in)                    # the run's states kept for answers

`woolf train` commits to its path (woolf/protocol/proof.py: a state digest every k steps, each step's
fingerprint); the states of its links are kept in .woolf/work/proof/ within a budget and, once the PR
is open, in .woolf/state/proof/<PR id>/ with the sealed recipe, so that `woolf prove`
(participant/prove.py) can serve what an audit asks for. Nothing of it is uploaded with the PR.
``carried.json`` there names the last PR's end state (AdamW's moments, the compression residual),
so that the next run's recipe can say which PR its carried optimizer state continues.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from woolf.participant.state import state_dir
from woolf.protocol.proof import EMPTY, effective_every, make_proof
from woolf.storage.files import write_bytes_atomic
from woolf.storage.weights import save_atomic
from woolf.workloads.features import PROOF

RUN = "proof"  # in .woolf/work: the current run's kept states and its chain.json
KEPT = "proof"  # in .woolf/state: one folder per open PR
CARRIED = "carried.json"
PRIVATE = "private.json"  # in a run's folder: where `woolf train --data PATH` read its text (local only)


def proof_root(ledger) -> Path:
    return state_dir(ledger) / KEPT


def recorder(ledger, features, steps: int, out: Path, follower, lead: bool):
    """The Recorder `train` passes its workload (every rank of a torchrun group gets one: the generators'
    gathering is collective), keeping states only on rank 0; None when the workload records no chain."""
    from woolf.workloads.proof import Recorder  # deferred: torch

    if PROOF not in features or ledger.config.workload.command:
        return None
    keep = out / RUN if lead else None
    if keep is not None:
        shutil.rmtree(keep, ignore_errors=True)
    return Recorder(every=effective_every(ledger.config.proof.every, steps), keep=keep, follower=follower)


def _last(ledger) -> dict:
    try:
        last = json.loads((proof_root(ledger) / CARRIED).read_text())
    except (OSError, ValueError):
        return {}
    return last if isinstance(last, dict) else {}


def _carried(ledger, start_opt: str) -> str | None:
    """The PR whose end optimizer state this run started from, when carried.json says so."""
    last = _last(ledger)
    return last.get("pr") if start_opt != EMPTY and last.get("opt") == start_opt else None


def carried_residual(ledger, residual_in: str | None) -> str | None:
    """The PR whose compression residual a top-k delta goes out with, when carried.json says so."""
    last = _last(ledger)
    return last.get("pr") if residual_in is not None and last.get("residual") == residual_in else None


def draft(ledger, hook, start_version: int, device, autocast: str = "off", private=None) -> dict:
    """The recipe's proof as training leaves it (its end is bound at submit); writes the run's chain.json.
    ``private``: (path, TrainData) of `woolf train --data PATH`: kept here (never sent) to serve an audit
    the samples of its batches (participant/prove.py)."""
    from woolf.workloads.proof import device_class  # deferred: torch

    start = {**hook.components[0], "version": start_version, "carried": _carried(ledger, hook.components[0]["opt"])}
    out = {"every": hook.every, "class": device_class(device, autocast), "start": start,
           "links": hook.links, "follow": hook.follow,
           "follow_every": ledger.config.workload.follow_every if hook.follower is not None else 0,
           "end": {"opt": hook.components[-1]["opt"]}}
    if hook.keep is not None:
        write_bytes_atomic(json.dumps({"at": hook.at, "fingerprints": hook.fingerprints, "kept": hook.kept}).encode(),
                           hook.keep / "chain.json")
        if private is not None:
            write_bytes_atomic(json.dumps({"path": str(Path(private[0]).resolve())}).encode(), hook.keep / PRIVATE)
    return out


def private_data(data) -> dict:
    """What a recipe declares of `woolf train --data PATH`'s text: its sha256 and size (the bytes a workload's
    batches are drawn from), so that an audit's samples are of a committed size."""
    text = b"\n".join(data.texts)
    return {"kind": "private", "sha256": hashlib.sha256(text).hexdigest(), "bytes": len(text)}


def seal(recipe: dict, delta_sha256: str, residual_in: str | None = None, residual_out: str | None = None,
         carried: str | None = None) -> dict:
    """``recipe`` with its proof bound to the delta (the chain's last link): what submission.json carries.
    ``carried``: the PR the residual going in came from, when the optimizer state named none (a fresh one)."""
    p = recipe.get("proof")
    if not isinstance(p, dict) or "links" not in p:
        return recipe
    end = {"opt": p["end"]["opt"], "residual_in": residual_in, "residual_out": residual_out, "delta": delta_sha256}
    start = {**p["start"], "carried": p["start"].get("carried") or carried}
    return {**recipe, "proof": make_proof(every=p["every"], device_class=p["class"], start=start,
                                          links=p["links"], end=end, follow=p["follow"],
                                          follow_every=p["follow_every"])}


def keep_run(ledger, work: Path, sub_id: str, recipe: dict, residual_in: dict | None) -> None:
    """Once PR ``sub_id`` is open: its run's states move to .woolf/state/proof/<id>/ with its sealed recipe
    (and the residual it went out with); carried.json names its end for the next run."""
    run = work / RUN
    p = recipe.get("proof") if isinstance(recipe, dict) else None
    if not isinstance(p, dict) or "head" not in p or not run.is_dir():
        return
    dest = proof_root(ledger) / sub_id
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(run), str(dest))
    write_bytes_atomic(json.dumps(recipe).encode(), dest / "recipe.json")
    if residual_in is not None:
        save_atomic({k: v.contiguous() for k, v in residual_in.items()}, dest / "residual-in.safetensors",
                    durable=False)
    write_bytes_atomic(json.dumps({"pr": sub_id, "opt": p["end"]["opt"],
                                   "residual": p["end"]["residual_out"]}).encode(), proof_root(ledger) / CARRIED)
