"""What a cheat who read the proof's code does: train less (or other data), and forge the rest of the chain.

Usage (woolf/demo/adversaries.py; benchmarks/proof_check.py):
    forge_run(ledger, wl, "lazy", base, steps=30, seed=7, trained=0.5)        # half the steps, the rest made up
    rec, weights = forge_chain(wl, w0, data, 30, 7, every=2, keep=tmp, trained=0.98)   # no ledger
    forge_run(ledger, wl, "lazy", base, 30, 7, trained=0.9, hide=True)         # a skip hidden in a middle segment
    forge_run(ledger, wl, "free-rider", base, 30, 7, data=other_text)           # the work on other data
    submit(ledger, SubmitOptions(contributor=name)); prove_once(ledger)        # as an honest participant would

It leaves exactly what `woolf train` leaves in .woolf/work (the trained weights, trained.json with a
recipe and a proof whose digests its own states match, the kept states), so `woolf submit` seals it to
its delta and `woolf prove` serves its states like anyone's. The lazy cheat trains the first
``trained`` share of its steps (its optimizer and data position are real up to there), then makes up
the rest of its states by stretching its progress (the delta scaled to look whole) and makes up the
steps' fingerprints; with ``hide`` it trains every segment but one, in which it skips the share it
saves and carries on from there, so only that segment's replay fails. The free-rider trains on other
data and declares its own shard. Each is caught when an audited segment crosses what it made up.
"""

from __future__ import annotations

import json
import random
import secrets

import torch

from woolf.core.chain import digests
from woolf.ledger.recipes import fresh_recipe, global_step
from woolf.participant.proof import RUN, draft
from woolf.participant.state import work_dir
from woolf.protocol.proof import COMPONENTS, effective_every, link_steps, segment_digest, state_digest
from woolf.storage.files import write_bytes_atomic
from woolf.storage.weights import save_atomic
from woolf.workloads.features import GLOBAL_STEP, features_of
from woolf.workloads.proof import Recorder

HIDDEN_SEED = 0x5EED


class _Until(Recorder):
    """A recorder of a run of ``declared`` steps whose loop stops after ``stop`` of them."""

    def __init__(self, every: int, keep, declared: int, stop: int):
        super().__init__(every, keep=keep, keep_bytes=1 << 40)
        self.declared, self.stop = declared, stop

    def begin(self, params, opt, gen, done, steps, device="cpu"):
        first, _, done = super().begin(params, opt, gen, done, self.declared, device)
        return first, self.stop, done


def _made_up(state: dict, base: dict, factor: float) -> dict:
    """``state`` with its weights stretched from ``base`` by ``factor`` (what the cheat says it reached)."""
    out = dict(state)
    for k, v in state.items():
        if k.startswith("params/"):
            b = base[k[len("params/"):]].to(v.dtype)
            out[k] = b + factor * (v - b)
    return out


def _forge_links(rec: _Until, state: dict, base: dict, stop: int) -> None:
    """Links after ``stop``: made-up states (progress stretched), made-up fingerprints, all kept."""
    rng = random.Random(secrets.randbits(64))
    rec.fingerprints += [f"{rng.getrandbits(64):016x}" for _ in range(rec.declared - stop)]
    for i in range(len(rec.links), len(rec.at)):
        fake = _made_up(state, base, rec.at[i] / max(stop, 1))
        comps = digests(fake, COMPONENTS)
        rec.links.append([state_digest(comps), segment_digest(rec.fingerprints[rec.at[i - 1]:rec.at[i]])])
        rec.components.append(comps)
        name = f"link-{i:04d}.safetensors"
        save_atomic(fake, rec.keep / name, metadata={"step": str(rec.at[i])}, durable=False)
        rec.kept[i] = name


def forge_chain(wl, w0: dict, data, steps: int, seed: int, every: int, keep, trained: float = 1.0,
                hide: bool = False, extra: dict | None = None):
    """(its recorder, the weights it says it reached): a cheat's run from ``w0`` on ``data`` with a chain
    of a link every ``every`` steps whose states are kept in ``keep`` (no ledger: benchmarks use it)."""
    stop = max(1, min(steps, round(steps * trained))) if not hide else steps
    rec = _Until(every, keep, steps, stop)
    if hide and trained < 1.0:
        rec = _hidden(rec, steps, trained)
    torch.manual_seed(seed)
    new, _ = wl.train(dict(w0), data, steps, seed=seed, proof=rec, **(extra or {}))
    if stop < steps:
        final = _made_up(rec.state(), w0, steps / stop)
        _forge_links(rec, rec.state(), w0, stop)
        new = {k: final[f"params/{k}"].detach().clone() if f"params/{k}" in final else v for k, v in new.items()}
    return rec, new


def forge_run(ledger, wl, name: str, base, steps: int, seed: int, trained: float = 1.0, data=None,
              hide: bool = False) -> dict:
    """Leave in .woolf/work what `woolf train` would, for a cheat (see the module's docstring); its record."""
    out = work_dir(ledger)
    out.mkdir(parents=True, exist_ok=True)
    w0 = ledger.load_weights(base)
    extra = {"global_step": global_step(ledger, base)} if GLOBAL_STEP in features_of(wl) else {}
    rec, new = forge_chain(wl, w0, data or wl.default_data(name, base.version), steps, seed,
                           effective_every(ledger.config.proof.every, steps), out / RUN, trained, hide, extra)
    recipe = fresh_recipe(ledger, base, name, steps, seed)
    recipe["proof"] = draft(ledger, rec, base.version, "cpu")
    record = {"base_version": base.version, "base_commit": base.commit, "contributor": name,
              "training": {"steps": steps, "seconds": 0.0}, "metrics": None, "seed": seed, "recipe": recipe}
    save_atomic(new, out / "trained.safetensors")
    write_bytes_atomic(json.dumps(record).encode(), out / "trained.json")
    return record


def _hidden(rec: _Until, steps: int, trained: float) -> Recorder:
    """A recorder whose run leaves out ``1 - trained`` of its steps' updates in one block at a random place
    before the final segment (which every audit replays) and commits to what it reached: the segments the
    block touches do not replay, the others do."""
    at = link_steps(steps, rec.every)
    room = at[-2]  # the steps before the final segment
    n = min(room, max(1, round(steps * (1 - trained))))
    start = random.Random(secrets.randbits(64)).randrange(room - n + 1)
    return _Skipper(rec.every, rec.keep, set(range(start + 1, start + n + 1)))


class _Skipper(Recorder):
    """Drops the update of each skipped step (the weights as before it: the effect of not taking it; the
    demo still computes it, the cheat it stands for would not), committing to the state it reaches."""

    def __init__(self, every: int, keep, skip: set[int]):
        super().__init__(every, keep=keep, keep_bytes=1 << 40)
        self.skip, self._before = skip, None

    def step(self, step: int, loss, gnorm) -> None:
        if step in self.skip and self._before is not None:
            with torch.no_grad():
                for n, p in self.params.items():
                    p.copy_(self._before[n])
        super().step(step, loss, gnorm)
        self._before = {n: p.detach().clone() for n, p in self.params.items()}
