"""`woolf prove`: answer the validators' challenges to this clone's open PRs with the states their audits ask for.

Usage:
    done = prove(ledger)                    # one look: [{"pr", "validator", "segments", "bytes"}] answered now
    prove(ledger, watch=True, interval=2)   # until every PR this clone keeps states for is settled

For each open PR whose run's states `woolf submit` kept (.woolf/state/proof/<id>/, participant/proof.py)
and each validator's challenge to it not answered yet, the states of the challenged segments'
starts (and ends, when asked) are written as one safetensors file each (the link's state, the
segment's step fingerprints in the metadata, the residual going in for a top-k PR's final segment),
uploaded to the ledger's storage and named in an answer commit (woolf/ledger/challenges.py), signed
when this clone signs. A state not kept is recomputed by replaying from the nearest kept one
(woolf/ledger/replay.py: bit for bit on the machine that trained it). A settled PR's states are removed.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save

from woolf.errors import UsageError, WoolfError
from woolf.forges import forge_for
from woolf.ledger.challenges import challenges, post_answer
from woolf.ledger.proof_states import upload_state, write_state
from woolf.ledger.replay import replay_segment, workload_for
from woolf.ledger.sealed import seal_to
from woolf.participant.proof import PRIVATE, private_data, proof_root
from woolf.protocol.challenge import StatePin
from woolf.storage import kinds
from woolf.storage.files import hashes_of_file

ANSWERED = "answered.json"


def _json(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def _link_state(ledger, run: Path, recipe: dict, chain: dict, i: int) -> dict:
    """The state after link ``i``'s step: the kept file, or replayed from the nearest kept link before it."""
    kept = {int(k): v for k, v in chain.get("kept", {}).items()}
    if i in kept and (run / kept[i]).is_file():
        return load_file(run / kept[i])
    j = max(k for k in kept if k < i and (run / kept[k]).is_file())
    kind = _trainer(recipe)
    device = "cuda" if recipe.get("device") == "cuda" else "cpu"
    hook, _ = replay_segment(ledger, recipe, kind, load_file(run / kept[j]), chain["at"][j], chain["at"][i], device,
                             keep_end=True)
    return hook.end_state


def _trainer(recipe: dict):
    """The kind whose training a segment replays: adapters for a LoRA recipe, else the whole model (a top-k
    delta is trained as a dense one; only its derivation from the final state differs)."""
    return kinds.LORA if recipe.get("lora") else kinds.DENSE


def _samples(ledger, run: Path, recipe: dict, state: dict, steps: int, key: str) -> bytes:
    """A private-data PR's batches of one segment (drawn from its data position), sealed to the validator."""
    wl = workload_for(ledger, recipe)
    where = _json(run / PRIVATE, {}).get("path")
    data = wl.data_from_path(where) if isinstance(where, str) else None
    if data is None or private_data(data)["sha256"] != recipe["data"].get("sha256"):
        raise UsageError(f"{run.name}: its private data is not where it was trained from any more ({where})",
                         hint="put it back to answer the audit")
    gen = torch.Generator()
    gen.set_state(state["data"])
    return seal_to(key, save(wl.sample_windows(data, gen, steps)))


def _serve(ledger, run: Path, recipe: dict, challenge) -> tuple[dict, int]:
    """({segment, "end:<segment>" or "samples:<segment>": StatePin}, bytes) of the files answering
    ``challenge``, uploaded."""
    chain = _json(run / "chain.json", {})
    at, fps = chain["at"], chain["fingerprints"]
    last = len(at) - 2
    pins, sent = {}, 0
    for i in challenge.segments:
        if not 0 <= i <= last:
            continue  # a segment the chain does not have: nothing to serve
        state = dict(_link_state(ledger, run, recipe, chain, i))
        if i == last and (run / "residual-in.safetensors").is_file():
            state.update({f"residual/{k}": v for k, v in load_file(run / "residual-in.safetensors").items()})
        meta = {"segment": i, "step": at[i], "fingerprints": ",".join(fps[at[i]:at[i + 1]])}
        keys = [(i, state, meta)]
        if challenge.ends:
            keys.append((f"end:{i}", _link_state(ledger, run, recipe, chain, i + 1), {"segment": i, "end": at[i + 1]}))
        if recipe["data"].get("kind") == "private" and challenge.key:
            keys.append((f"samples:{i}", _samples(ledger, run, recipe, state, at[i + 1] - at[i], challenge.key), None))
        for key, st, m in keys:
            out = run / f"served-{key}.safetensors".replace(":", "-")
            if m is None:  # sealed bytes, uploaded as they are
                out.write_bytes(st)
                md5, sha = hashes_of_file(out)
                pin = StatePin(md5, out.stat().st_size, sha)
            else:
                pin = write_state(st, m, out)
            pins[key] = upload_state(ledger, out, pin)
            sent += pin.size
            out.unlink(missing_ok=True)
    return pins, sent


def prove_once(ledger, forge=None) -> list[dict]:
    """Answer each challenge not answered yet to this clone's open PRs; what was answered."""
    root = proof_root(ledger)
    if not root.is_dir():
        return []
    ledger.fetch()
    forge = forge or forge_for(ledger)
    if not forge.carries_challenges:
        return []
    done = []
    for run in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            pr = forge.get(run.name, fetch=False)
        except UsageError:  # not a PR on this hub (any more)
            continue
        if pr.state != "open":
            shutil.rmtree(run, ignore_errors=True)  # settled: no audit will ask any more
            continue
        recipe, answered = _json(run / "recipe.json", None), set(_json(run / ANSWERED, []))
        if not isinstance(recipe, dict):
            continue
        for name, c in sorted(challenges(ledger, forge, pr).items()):
            if c.commit in answered or time.time() > c.deadline:
                continue
            pins, sent = _serve(ledger, run, recipe, c)
            post_answer(ledger, forge, pr, c.commit, pins)
            answered.add(c.commit)
            (run / ANSWERED).write_text(json.dumps(sorted(answered)))
            done.append({"pr": pr.id, "validator": name, "segments": list(c.segments), "bytes": sent})
    return done


def prune(ledger, forge=None) -> list[str]:
    """Remove the kept states of PRs that are settled (or not on the hub), as this clone last fetched them."""
    root = proof_root(ledger)
    if not root.is_dir():
        return []
    forge = forge or forge_for(ledger)
    gone = []
    for run in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            settled = forge.get(run.name, fetch=False).state != "open"
        except UsageError:
            settled = True
        if settled:
            shutil.rmtree(run, ignore_errors=True)
            gone.append(run.name)
    return gone


def open_runs(ledger) -> list[str]:
    root = proof_root(ledger)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def prove(ledger, watch: bool = False, interval: float = 2.0, until: float | None = None, on_answer=None) -> list[dict]:
    """prove_once, and with ``watch`` again every ``interval`` seconds until no kept PR is open (or ``until``,
    a time.time()); ``on_answer(entry)`` for each answer sent."""
    done: list[dict] = []
    while True:
        try:
            got = prove_once(ledger)
        except WoolfError:
            if not watch:
                raise
            got = []  # the hub or storage is unreachable for now: look again
        for entry in got:
            if on_answer:
                on_answer(entry)
        done += got
        if not watch or not open_runs(ledger) or (until is not None and time.time() > until):
            return done
        time.sleep(interval)
