"""Running a recipe's training for its proof: the start (no step taken), or one segment from a state.

Usage:
    start = start_digests(ledger, recipe, kind, "cpu")                  # {params, opt, data, rng} at step 0
    hook, out = replay_segment(ledger, recipe, kind, state, 8, 12, "cpu", deadline=time.monotonic() + 600)
    hook.end, hook.fingerprints, hook.end_state                          # woolf/workloads/proof.py Replay
    shift = final_shift(ledger, recipe)                                 # the last look at main, or None

Both roles run it: a validator to audit a drawn PR (woolf/validator/audit_proof.py), a participant to
recompute a state it did not keep (woolf/participant/proof.py). The workload is built from the
recipe's own workload and parameters, the data is the recipe's shard, the learning-rate schedule
its global step, the follow points its proof's (each rebase applies `version - previous version`,
both read from the ledger), at the recipe's thread count (woolf/workloads/proof.py device_class).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from woolf.errors import Rejected
from woolf.storage.weights import save_atomic
from woolf.workloads.base import TrainData, load_workload
from woolf.workloads.features import BIND, GLOBAL_STEP, PROOF, features_of
from woolf.workloads.proof import Replay, StartCheck, Stop

MAIN = "refs/remotes/origin/main"


class ReplayTimeout(Exception):
    """Raised from the training loop's progress callback past the replay's deadline."""


def workload_for(ledger, recipe: dict):
    """The recipe's workload, built with its parameters (checked against its declared batch and lr)."""
    wl = load_workload(replace(ledger.config.workload, name=recipe["workload"], params=recipe["params"]))
    feats = features_of(wl)
    if BIND in feats:
        wl.bind(lambda rel: ledger.git.show_bytes(f"{ledger.main_ref}:{rel}"))
    if PROOF not in feats:
        raise Rejected(f"retrain: the {recipe['workload']} workload cannot replay a proof of training")
    for key, attr in (("batch", "batch_size"), ("lr", "lr")):
        if recipe.get(key) is not None and getattr(wl, attr, recipe[key]) != recipe[key]:
            raise Rejected(f"recipe: its {key} {recipe[key]!r} is not what its params give ({getattr(wl, attr)!r})")
    return wl


def _weights(ledger, number: int, cache: dict) -> dict:
    if number not in cache:
        ref = MAIN if ledger.git.rev_parse(MAIN) else ledger.main_ref
        cache[number] = ledger.load_weights(ledger.show(number, ref=ref))
    return cache[number]


class ReplayFollow:
    """A follower that moves the weights at the proof's follow points, as `woolf train`'s Follower did."""

    def __init__(self, ledger, proof: dict, hook, cache: dict):
        self.ledger, self.hook, self.cache = ledger, hook, cache
        self.points = {s: v for s, v in proof.get("follow", [])}
        self.before = {}
        prev = proof["start"]["version"]
        for s, v in sorted(self.points.items()):
            self.before[s], prev = prev, v
        self.rebases = 0

    def shift(self, step: int) -> dict | None:
        if step not in self.points:
            return None
        new, old = _weights(self.ledger, self.points[step], self.cache), _weights(self.ledger, self.before[step],
                                                                                  self.cache)
        return {k: new[k].to(torch.float32) - old[k].to(torch.float32) for k in new}

    def __call__(self):
        return self.shift(self.hook.current + 1)  # apply_follow runs before the hook sees the step


def final_shift(ledger, recipe: dict, cache: dict | None = None) -> dict | None:
    """The shift of the last look at main after the loop (a follow point at step == steps), or None."""
    proof = recipe["proof"]
    follower = ReplayFollow(ledger, proof, None, {} if cache is None else cache)
    return follower.shift(recipe["steps"])


@contextlib.contextmanager
def _threads(n):
    old = torch.get_num_threads()
    if isinstance(n, int) and 0 < n <= 1024:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def run(ledger, recipe: dict, kind, hook, device: str, deadline: float | None = None, cache: dict | None = None,
        stop=None, train_data=None, clock=None):
    """The recipe's training under ``hook`` (a Replay or a StartCheck): the train's return. Past ``deadline``
    (time.monotonic), or when ``stop()`` says so (the ranks of a replay decide together), ReplayTimeout.
    ``clock``: ticked at every step (core/retrain_speed.py Clock: the validator's speed estimate)."""
    proof, cache = recipe["proof"], {} if cache is None else cache
    wl = workload_for(ledger, recipe)
    data = recipe["data"]
    if train_data is None:  # the declared shard; a private PR's samples come as ``train_data`` (a start reads none)
        train_data = (wl.default_data(data["owner"], data["version"]) if data["kind"] == "shard"
                      else TrainData([bytes(int(data.get("bytes", 0)))], "private data (not read)"))
    skeleton = dict(_weights(ledger, proof["start"]["version"], cache))  # the hook overwrites what it trains
    extra: dict = {}
    if GLOBAL_STEP in features_of(wl):
        extra["global_step"] = recipe["global_step"]
    if proof.get("follow"):
        extra.update(follow=ReplayFollow(ledger, proof, hook, cache), follow_every=proof.get("follow_every", 0))

    def progress(step: int, total: int, loss: float) -> None:
        if clock is not None:
            clock.tick()
        if (stop() if stop is not None else deadline is not None and time.monotonic() > deadline):
            raise ReplayTimeout(f"stopped at step {step} of {total}")

    torch.manual_seed(recipe["seed"])  # as `woolf train` does before training
    with _threads(proof["class"].get("threads")):
        return kind.proof_train(wl, skeleton, train_data, recipe, device=device, hook=hook, progress=progress,
                                extra=extra)


def start_digests(ledger, recipe: dict, kind, device: str, cache: dict | None = None) -> dict[str, str]:
    """The component digests of the state `woolf train` begins the recipe with (no step is taken)."""
    check = StartCheck()
    try:
        run(ledger, recipe, kind, check, device, cache=cache)
    except Stop:
        pass
    if check.start is None:
        raise Rejected("retrain: its workload never began training (no start to check)")
    return check.start


def replay_segment(ledger, recipe: dict, kind, state: dict, first: int, last: int, device: str,
                   deadline: float | None = None, keep_end: bool = False, cache: dict | None = None,
                   in_ranks: bool = False, stop=None, train_data=None, clock=None):
    """(the Replay hook, the train's return) of steps first+1..last from ``state``; a run of ``nproc`` > 1
    processes is replayed on as many (woolf/ledger/replay_ranks.py) unless this is one of them."""
    if int(recipe.get("nproc", 1)) > 1 and not in_ranks:
        from woolf.ledger.replay_ranks import replay_in_ranks  # deferred: torch.distributed's launcher

        with tempfile.TemporaryDirectory(prefix="woolf-state-") as tmp:
            path = Path(tmp) / "state.safetensors"
            save_atomic(state, path, durable=False)
            wall = None if deadline is None else time.time() + (deadline - time.monotonic())
            got = replay_in_ranks(ledger, recipe, kind.name, path, first, last, keep_end, wall)
        return got, got.out
    hook = Replay(state, first, last, keep_end=keep_end)
    out = run(ledger, recipe, kind, hook, device, deadline, cache, stop, train_data, clock)
    return hook, out
