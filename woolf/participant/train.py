"""A participant's training: train from the current version (submit.py then sends the delta as a PR).

Usage (or `from woolf.participant import train, TrainOptions`):
    result = train(ledger, TrainOptions(steps=60, contributor="alice"))   # -> .woolf/work/trained.*
    result = train(ledger)                                                # workload.steps, defaults

It takes one options object (the CLI, the demo and the tests build it; no keyword spelling).
What the workload's train() is given beyond the base protocol follows its declared FEATURES
(woolf/workloads/features.py).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from woolf.core.policy import decide
from woolf.core.scale import delta_scale
from woolf.core.staleness import attenuation
from woolf.errors import UsageError
from woolf.ledger.recipes import global_step
from woolf.ledger.tasks import reserve_for_training, take_shard_data
from woolf.ledger.trust import require_command_trust, require_trusted_head
from woolf.participant.distributed import Group, broadcast, fault_check, join, leave
from woolf.participant.lora import lora_spec, train_lora
from woolf.participant.lora_weights import Merged, evaluation, lora_base, rescale
from woolf.participant.proof import draft, private_data, recorder
from woolf.participant.recipe import declare
from woolf.participant.state import (
    auto_steps,
    record_speed,
    state_dir,
    work_dir,
)
from woolf.participant.verifiable import retrain_note
from woolf.protocol.contributor import contributor_id
from woolf.protocol.recipe import PRIVATE
from woolf.storage import kinds
from woolf.storage.files import write_bytes_atomic
from woolf.storage.weights import (
    load_checked,
    save_atomic,
    spec_of,
)
from woolf.workloads.features import (
    DISTRIBUTED,
    FINGERPRINT,
    FOLLOW,
    GLOBAL_STEP,
    IN_PLACE,
    STATE_DIR,
    features_of,
)

PRIVATE_DATA = PRIVATE["kind"]  # what the training summary says of `--data PATH`: "private"


@dataclass(frozen=True)
class TrainOptions:
    """How `train` runs; each field is the keyword `train` takes, with the same default."""

    steps: int | str | None = None  # steps, or "auto" (sized from speed); None: workload.steps
    data: str | None = None  # a file or directory of text; None: this contributor's shard
    device: str = "auto"  # "auto", "cpu", "cuda"
    seed: int = 0  # torch's seed for this run (batch order, dropout)
    offline: bool = False  # do not pull first: train from the local main (and follow nothing)
    contributor: str | None = None  # the contributor id; None: git user.name
    progress: Callable[[int, int, float], None] | None = None  # (step, total, loss) per step
    fresh: bool = False  # discard the optimizer state in .woolf/state first
    follow: bool = True  # follow main's newer versions while training (workload.follow_every)
    task: bool = True  # with an origin, train as a task: shard reserved, heartbeats, settled
    take: str | None = None  # train the shard of this expired, cancelled or failed task
    lora: str | None = None  # "r=R[,alpha=A][,targets=..]": LoRA adapters; None: workload.params.lora


def train(ledger, options: TrainOptions | None = None) -> dict:
    """Train from the newest version; keep the result in the git-ignored work area.

    ``options``: a TrainOptions (None: its defaults). The inner optimizer's state persists in
    .woolf/state across contributions (``fresh`` discards it); ``steps="auto"`` sizes the
    contribution from this participant's speed. With ``workload.follow_every`` set, training follows
    main's newer versions (woolf/participant/follow.py). With an origin (git-native forge) training is a task
    (woolf/ledger/tasks.py): its shard reserved with a lease before it starts, heartbeats while
    it runs, cancelled on Ctrl-C, failed on an error; ``take`` trains the shard of an expired
    task. ``task=False`` skips all that.
    """
    from woolf.workloads.base import resolve_device  # deferred: loads torch

    o = options if options is not None else TrainOptions()
    who = contributor_id(o.contributor, ledger.git)
    if isinstance(o.steps, int) and o.steps <= 0:
        raise UsageError(f"--steps must be a positive number of steps or 'auto', got {o.steps}")
    group = join(resolve_device(o.device))  # under torchrun: this rank's place (distributed.py)
    try:
        return _train(ledger, o, who, group)
    finally:
        leave(group)


def _train(ledger, o: TrainOptions, who: str, group: Group | None) -> dict:
    """``train`` on this process: alone, or one rank of a torchrun group (rank 0 does the ledger's work)."""
    import torch  # deferred: torch

    from woolf.workloads.base import resolve_device  # deferred: loads torch

    lead = group is None or group.rank == 0
    head = (ledger.head() if o.offline else ledger.pull()) if lead else None
    commit = broadcast(head.commit if lead else None, group)  # the others wait for rank 0's pull
    head = head or ledger.head()
    if head.commit != commit:
        raise UsageError(f"rank {group.rank}: local main is {head.commit[:12]}, rank 0 trains from {commit[:12]}",
                         hint="every process of one run must use the same clone")
    require_trusted_head(ledger, head)  # config and weights came from maintainer and validator keys
    cfg = ledger.config
    wl = ledger.workload()
    features = features_of(wl)
    if group and DISTRIBUTED not in features:
        raise UsageError(f"workload {cfg.workload.name!r} cannot train on several processes",
                         hint="run `woolf train` without --nproc or torchrun")
    lora = lora_spec(ledger, o.lora, resolve_device(o.device))  # None trains every parameter
    if lora is not None and group:
        raise UsageError("--lora trains on one process", hint="run `woolf train --lora ...` without --nproc")
    fingerprint = wl.fingerprint() if FINGERPRINT in features else cfg.workload.name
    if o.fresh and lead:
        shutil.rmtree(state_dir(ledger), ignore_errors=True)
    steps = (auto_steps(ledger, fingerprint, state_dir(ledger)) if o.steps == "auto"
             else (o.steps or cfg.workload.steps))
    steps = broadcast(steps, group)
    task = reserve_for_training(ledger, who, head, steps, o.take) if o.task and lead else None
    data = o.data
    if o.take and not data and not cfg.workload.command:  # an expired task's shard: its owner's
        owner, version = take_shard_data(broadcast(task.rec.shard if task else None, group))
        data = ("shard", owner, version)
    with task.running() if task else contextlib.nullcontext():
        device = group.device if group else resolve_device(o.device)
        # a LoRA run's base in its frozen dtype, read a tensor at a time (participant/lora_weights.py)
        base = ledger.load_weights(head) if lora is None else lora_base(ledger, wl, head, lora, device)
        out = work_dir(ledger)
        out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(o.seed)
        bench = ledger.benchmark()
        # the version's own recorded metrics, when it has them (validators evaluated it already)
        before = head.metrics if head.metrics and cfg.policy.metric in head.metrics else None
        train_data = None
        evaluate, judged = (wl.evaluate, None) if lora is None else evaluation(wl, base)
        if judged and not judged["exact"]:
            before = None  # the ledger's numbers are of another dtype: both measured here, like with like
        if cfg.workload.command:
            trained, summary = _train_by_command(ledger, head, base, data, steps, o.seed, out)
        else:
            train_data = (wl.default_data(data[1], data[2]) if isinstance(data, tuple)
                          else wl.data_from_path(data) if data
                          else wl.default_data(who, head.version))
            extra, follower = _train_keywords(ledger, features, o, head, base, group) if lora is None else ({}, None)
            hook = recorder(ledger, features, steps, out, follower, lead)  # commits to the path (proof.py)
            extra.update({"proof": hook} if hook is not None and lora is None else {})
            recipe_head = head  # the version training began from
            if (extra.get("in_place") or lora is not None) and before is None and lead:  # base is trained where it is:
                # measure it first (a LoRA run consumes base too: participant/lora.py)
                before = evaluate(base, bench, device)
            if lora is not None:  # adapters over the frozen version; the factors are the delta
                trained, summary = train_lora(ledger, wl, head, base, train_data, steps, lora, device, o.seed,
                                              o.progress, proof=hook)
                summary["lora"]["evaluation"] = judged
            else:
                trained, summary = wl.train(base, train_data, steps, device=device, seed=o.seed,
                                            progress=_progress(o.progress, group), **extra)
            if not lead:
                return {"rank": group.rank, "base_version": head.version, "training": summary}
            if follower is not None:  # one last look: the delta is relative to the newest version
                trained = _last_look(follower, hook, trained, steps, summary)
                if follower.rebases:
                    head, base, before = follower.base, follower.base_weights, None
            recipe = declare(ledger, wl, recipe_head, data, steps, o.seed, device, summary, extra, who,
                             task.rec.id if task else None, lora)  # how this delta was trained
            recipe.update(base_version=head.version, base_commit=head.commit,  # followed: the last base
                          nproc=group.world if group else 1)
            if hook is not None and hook.links:  # its chain (sealed to the delta by submit)
                private = (data, train_data) if isinstance(data, str) else None
                recipe["proof"] = draft(ledger, hook, recipe_head.version, device, str(summary.get("autocast", "off")),
                                        private)
                recipe["data"] = private_data(train_data) if private else recipe["data"]
        _summarize_data(summary, data, train_data)
        record_speed(fingerprint, summary, state_dir(ledger))
        metrics = {"before": before or evaluate(base, bench, device)}
        del base  # trained in place, or no longer needed: one model less while evaluating
        metrics["after"] = evaluate(trained, bench, device)
        rescale = _saved(ledger, head, lora is not None, trained, out / "trained.safetensors")
        gate = _predicted_gate(cfg, evaluate, rescale, trained, metrics, bench, device)
        record = {"base_version": head.version, "base_commit": head.commit, "contributor": who,
                  "training": summary, "metrics": metrics, "seed": o.seed,
                  "task": task.rec.id if task else None, "lora": lora.text() if lora else None,
                  "gate": gate}
        if not cfg.workload.command:
            record["recipe"] = recipe  # an external command's training declares none
        write_bytes_atomic(json.dumps(record, indent=2).encode(), out / "trained.json")
    return {**record, "weights": str(out / "trained.safetensors"),
            "skipped": train_data.skipped if train_data else [],  # `--data DIR`'s: shown here, never sent
            "unverifiable": retrain_note(cfg, record.get("recipe"), (kinds.LORA if lora else kinds.DENSE).name)}


def _summarize_data(summary: dict, data, train_data) -> None:
    """What the training summary (published in the PR) says of the data: how many files, how many `--data DIR`
    skipped, and "private" for your own files, never where they are on this machine."""
    if train_data is not None:
        summary["files"] = len(train_data.files)
        if train_data.skipped:
            summary["skipped"] = len(train_data.skipped)
    if data and not isinstance(data, tuple):
        summary["data"] = PRIVATE_DATA


def _last_look(follower, hook, trained: dict, steps: int, summary: dict) -> dict:
    """After the last step, the weights moved by whatever main moved since the last follow (a follow point
    at step ``steps`` in the proof's chain)."""
    import torch  # deferred: torch

    shift = follower()
    if shift is not None:
        trained = {k: (v.to(torch.float32) + shift[k]).to(v.dtype) for k, v in trained.items()}
    if hook is not None:
        hook.followed_at_end(steps)
    summary["followed"] = follower.rebases
    return trained


def _predicted_gate(cfg, evaluate, rescale, trained: dict, metrics: dict, bench: bytes, device) -> dict:
    """What the gate would say of the merge a validator makes of this result at staleness 0:
    base + alpha_base * f(0) * delta, not the whole delta (a joiner told "the gate would
    reject" was merged). Under a momentum rule the merge also carries the rule's state, which
    only the validator knows; the prediction is the delta's own share. ``metrics["merged"]`` is
    the candidate's evaluation (``evaluate``), where the scale is not 1. ``trained`` is already saved:
    ``rescale(trained, scale)`` builds the merge in its place (one model in memory, as in training)."""
    scale = delta_scale(cfg.merge.alpha_base, attenuation(cfg.merge.staleness, 0))
    judged = metrics["after"]
    if scale != 1.0:
        rescale(trained, scale)
        judged = metrics["merged"] = evaluate(trained, bench, device)
    gate = decide(cfg.policy, metrics["before"], judged)
    return {"passes": gate.accepted, "reason": gate.reason, "scale": scale, "rule": cfg.merge.rule}


def _saved(ledger, head, lora: bool, trained: dict, out: Path):
    """``trained`` written at ``out``; the ``rescale`` the predicted gate uses on it. A LoRA result is written
    as the float32 merge a tensor at a time (its ``trained`` may be bf16: never the float32 model in memory)."""
    if not lora:
        save_atomic(trained, out, hashed=True)  # written from the tensors' memory
        return _rescale_dense(lambda: ledger.weights_path(head))
    with Merged(ledger, head) as merged:
        merged.save(out)
    return _rescale_lora(ledger, head)


def _rescale_dense(base_path):
    """``rescale`` of a dense result: the base read a tensor at a time from the version's file, ``base_path()``."""

    def rescale(trained: dict, scale: float) -> None:
        from safetensors import safe_open  # deferred: torch

        from woolf.core.merge import apply_delta  # deferred: torch

        with safe_open(str(base_path()), framework="pt") as base:
            for name in list(trained):  # one tensor's delta at a time: no second model-sized copy
                old = base.get_tensor(name)
                delta = trained[name].float() - old.float()
                trained[name].copy_(apply_delta({name: old}, {name: delta}, scale)[name])  # in place: the
                # evaluation model holds these tensors (a new one would keep the old alive: a second model)

    return rescale


def _rescale_lora(ledger, head):
    """``rescale`` of a LoRA result: each target the version's float32 tensor plus scale times its expansion,
    in the trained weights' dtype (participant/lora_weights.py ``Merged``): the validator's merge at that scale."""

    return lambda trained, scale: rescale(ledger, head, trained, scale)


def _progress(progress, group: Group | None):
    """Rank 0 reports progress; every rank checks the tests' fault hook (distributed.py)."""
    if group is None:
        return progress
    rank = group.rank

    def report(step: int, total: int, loss: float) -> None:
        fault_check(rank, step)
        if progress is not None and rank == 0:
            progress(step, total, loss)

    return report


def _train_keywords(ledger, features: frozenset[str], o: TrainOptions, head, base, group) -> tuple:
    """What the workload's train() gets beyond the base protocol, by its declared features;
    and the Follower, when it follows main (one process only). A workload that trains in place
    gets ``in_place=True``: the base loaded for it is its memory (one model, not two)."""
    from woolf.participant.follow import Follower  # deferred: loads torch, yaml

    cfg = ledger.config
    extra: dict = {}
    if STATE_DIR in features:
        extra["state_dir"] = state_dir(ledger) / "optimizer"
    if GLOBAL_STEP in features:  # the ledger's progress, for LR schedules
        extra["global_step"] = global_step(ledger, head)  # the one formula (ledger/recipes.py): recipes declare it
    if IN_PLACE in features:
        extra["in_place"] = True
    follower = None
    if o.follow and cfg.workload.follow_every and FOLLOW in features and not o.offline and group is None:
        # trained in place, the base is read again from the ledger when main first moves
        follower = Follower(ledger, head, None if IN_PLACE in features else base)
        extra.update(follow=follower, follow_every=cfg.workload.follow_every)
    return extra, follower


def _train_by_command(ledger, head, base, data, steps: int, seed: int, out: Path) -> tuple:
    """workload.command trains: the trained weights (checked like any) and its summary."""
    from woolf.workloads.command import run_training_command  # deferred: loads torch, numpy

    cfg = ledger.config
    if not data:
        raise UsageError("this ledger trains with an external command: pass --data PATH")
    require_command_trust(ledger, head)
    state_dir(ledger).mkdir(parents=True, exist_ok=True)
    path, summary = run_training_command(cfg.workload.command, base, data, steps, seed, out,
                                         state=state_dir(ledger) / "command")
    trained = load_checked(path, cfg.limits, expect=spec_of(base), label="command output")
    shutil.rmtree(path.parent, ignore_errors=True)
    return trained, summary
