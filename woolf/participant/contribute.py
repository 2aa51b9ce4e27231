"""A participant's side: train from the current version, submit the delta as a PR.

Usage:
    result = train(ledger, steps=60, contributor="alice")     # -> .woolf/work/trained.*
    result = train(ledger, TrainOptions(steps=60, contributor="alice"))   # the same
    pr = submit(ledger, message="60 steps on my shard")        # -> {"id": ..., "base_version": ..}
    pr = submit(ledger, SubmitOptions(weights=Path("mine.safetensors"), base_version=3))

Each takes its options object, or the options' fields as keywords (unknown ones: TypeError).
What the workload's train() is given beyond the base protocol follows its declared FEATURES
(woolf/workloads/features.py).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from woolf.core import npdelta
from woolf.core.policy import decide
from woolf.errors import UsageError
from woolf.forges import forge_for
from woolf.ledger.submission import SubmitDeltaOptions, check_delta, submit_delta
from woolf.ledger.tasks import reserve_for_training, take_shard_data
from woolf.ledger.trust import require_command_trust, require_trusted_head
from woolf.participant.feedback import clear_residual, remember, settle
from woolf.participant.residual import compress_with_feedback, compression_spec, keep_residual
from woolf.participant.state import (
    auto_steps,
    mark_submitted,
    record_speed,
    state_dir,
    waiting_result,
    work_dir,
)
from woolf.protocol import layout
from woolf.protocol.contributor import contributor_id
from woolf.storage.files import write_bytes_atomic
from woolf.storage.streamdelta import StreamedDelta
from woolf.storage.weights import (
    TRUSTED_LIMITS,
    load_checked,
    read_spec,
    save_atomic,
    spec_of,
    to_torch,
)
from woolf.timing import Timer
from woolf.workloads.features import FINGERPRINT, FOLLOW, GLOBAL_STEP, STATE_DIR, features_of


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


def train(ledger, options: TrainOptions | None = None, **kwargs) -> dict:
    """Train from the newest version; keep the result in the git-ignored work area.

    ``options`` or its fields as keywords (``train(ledger, steps=60)``), or both (the keywords
    win). The inner optimizer's state persists in .woolf/state across contributions (``fresh``
    discards it); ``steps="auto"`` sizes the contribution from this participant's speed. With
    ``workload.follow_every`` set, training follows main's newer versions
    (woolf/participant/follow.py). With an origin (git-native forge) training is a task
    (woolf/ledger/tasks.py): its shard reserved with a lease before it starts, heartbeats while
    it runs, cancelled on Ctrl-C, failed on an error; ``take`` trains the shard of an expired
    task. ``task=False`` skips all that.
    """
    import torch  # deferred: torch

    from woolf.workloads.base import resolve_device  # deferred: loads torch

    o = replace(options, **kwargs) if options is not None else TrainOptions(**kwargs)
    who = contributor_id(o.contributor, ledger.git)
    if isinstance(o.steps, int) and o.steps <= 0:
        raise UsageError(f"--steps must be a positive number of steps or 'auto', got {o.steps}")
    head = ledger.head() if o.offline else ledger.pull()
    require_trusted_head(ledger, head)  # config and weights came from maintainer and validator keys
    cfg = ledger.config
    wl = ledger.workload()
    fingerprint = wl.fingerprint() if FINGERPRINT in features_of(wl) else cfg.workload.name
    if o.fresh:
        shutil.rmtree(state_dir(ledger), ignore_errors=True)
    steps = (auto_steps(ledger, fingerprint, state_dir(ledger)) if o.steps == "auto"
             else (o.steps or cfg.workload.steps))
    task = reserve_for_training(ledger, who, head, steps, o.take) if o.task else None
    data = o.data
    if o.take and not data and not cfg.workload.command:  # an expired task's shard: its owner's
        owner, version = take_shard_data(task.rec.shard)
        data = ("shard", owner, version)
    with task.running() if task else contextlib.nullcontext():
        device = resolve_device(o.device)
        base = ledger.load_weights(head)
        out = work_dir(ledger)
        out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(o.seed)
        if cfg.workload.command:
            trained, summary = _train_by_command(ledger, head, base, data, steps, o.seed, out)
        else:
            train_data = (wl.default_data(data[1], data[2]) if isinstance(data, tuple)
                          else wl.data_from_path(data) if data
                          else wl.default_data(who, head.version))
            extra, follower = _train_keywords(ledger, features_of(wl), o, head, base)
            trained, summary = wl.train(base, train_data, steps, device=device, seed=o.seed,
                                        progress=o.progress, **extra)
            summary["files"] = len(train_data.files)
            if follower is not None:  # one last look: the delta is relative to the newest version
                shift = follower()
                if shift is not None:
                    trained = {k: (v.to(torch.float32) + shift[k]).to(v.dtype)
                               for k, v in trained.items()}
                summary["followed"] = follower.rebases
                head, base = follower.base, follower.base_weights
        record_speed(fingerprint, summary, state_dir(ledger))
        bench = ledger.benchmark()
        # the version's own recorded metrics, when it has them (validators evaluated it already)
        before = head.metrics if head.metrics and cfg.policy.metric in head.metrics else None
        metrics = {"before": before or wl.evaluate(base, bench, device),
                   "after": wl.evaluate(trained, bench, device)}
        save_atomic(trained, out / "trained.safetensors")
        gate = decide(cfg.policy, metrics["before"], metrics["after"])  # what the gate would say, unattenuated
        record = {"base_version": head.version, "base_commit": head.commit, "contributor": who,
                  "training": summary, "metrics": metrics, "seed": o.seed,
                  "task": task.rec.id if task else None,
                  "gate": {"passes": gate.accepted, "reason": gate.reason}}
        write_bytes_atomic(json.dumps(record, indent=2).encode(), out / "trained.json")
    return {**record, "weights": str(out / "trained.safetensors")}


def _train_keywords(ledger, features: frozenset[str], o: TrainOptions, head, base) -> tuple:
    """What the workload's train() gets beyond the base protocol, by its declared features;
    and the Follower, when it follows main."""
    from woolf.participant.follow import Follower  # deferred: loads torch, yaml

    cfg = ledger.config
    extra: dict = {}
    if STATE_DIR in features:
        extra["state_dir"] = state_dir(ledger) / "optimizer"
    if GLOBAL_STEP in features:  # the ledger's progress, for LR schedules
        extra["global_step"] = head.version * cfg.workload.steps
    follower = None
    if o.follow and cfg.workload.follow_every and FOLLOW in features and not o.offline:
        follower = Follower(ledger, head, base)
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


@dataclass(frozen=True)
class SubmitOptions:
    """What `submit` sends and where; each field is the keyword `submit` takes, same default."""

    weights: Path | None = None  # weights trained by any means; None: `train`'s, in .woolf/work
    message: str = ""  # the PR's note
    contributor: str | None = None  # the contributor id; None: the trained record's, git user.name
    base_version: int | None = None  # with weights: the version they came from; None: local main
    forge: str | None = None  # the forge that opens the PR (forges/); None: the ledger's own
    delta_url_base: str | None = None  # public https URL of your DVC storage, for fork PRs
    delta_remote: str | None = None  # upload the delta to this DVC remote of yours
    error_feedback: bool | None = None  # add what earlier PRs did not get merged; None: config's
    compress: str | None = None  # "dense" or "topk:..." (protocol/compress_spec.py); None: config's
    compress_feedback: bool = True  # keep what top-k dropped for the next delta


def submit(ledger, options: SubmitOptions | None = None, **kwargs) -> dict:
    """Delta = trained - base, checked, compressed (``compress`` or delta.compress), uploaded and
    verified, then the PR ref is pushed. A top-k delta keeps what it dropped for the next one.
    ``options`` or its fields as keywords (``submit(ledger, message="...")``), or both."""
    o = replace(options, **kwargs) if options is not None else SubmitOptions(**kwargs)
    record: dict = {}
    weights, base_version = o.weights, o.base_version
    cspec = compression_spec(ledger.config, o.compress)  # a bad --compress is a usage error first
    if weights is None:
        meta_path = work_dir(ledger) / "trained.json"
        if not meta_path.exists():
            raise UsageError("nothing trained to submit",
                             hint="run `woolf train` first, or pass --weights")
        earlier = waiting_result(ledger)
        if earlier and earlier["submitted"]:
            raise UsageError(f"the result in {layout.WORK}/work was submitted already, as PR {earlier['submitted']}",
                             hint=f"`woolf train` for a new contribution; `woolf pr show {earlier['submitted']}` "
                                  "for that PR's state")
        record = json.loads(meta_path.read_text())
        weights = work_dir(ledger) / "trained.safetensors"
        base_version = record["base_version"]
    who = contributor_id(o.contributor or record.get("contributor"), ledger.git)
    dirty = ledger.git.out("status", "--porcelain", "--untracked-files=no")
    if dirty:
        raise UsageError(f"the checkout has uncommitted changes to ledger files:\n{dirty}",
                         hint="a submission carries only a delta; `git stash` or `git checkout .` "
                              "first")
    ledger.fetch()
    origin_head = ledger.head("refs/remotes/origin/main")
    if base_version is None:
        base_version = ledger.head().version
    if not 0 <= base_version <= origin_head.version:
        raise UsageError(f"base version {base_version} is not on origin's main "
                         f"(0..{origin_head.version})")
    base = ledger.show(base_version, ref="refs/remotes/origin/main")
    if record and record.get("base_commit") != base.commit:
        raise UsageError(
            f"the weights were trained from {record.get('base_commit', '?')[:12]}, which is no "
            f"longer version {base_version} on origin's main",
            hint="`woolf train` again from the current version")
    cfg = ledger.config
    timer = Timer()
    feedback = cfg.workload.error_feedback if o.error_feedback is None else o.error_feedback
    streamed = _streamed_delta(ledger, base, Path(weights), timer) if cspec is None and not feedback else None
    if streamed is not None:  # a dense float32 delta: computed, checked and written tensor by tensor
        result = submit_delta(ledger, streamed, base, SubmitDeltaOptions(
            who=who, message=o.message, the_forge=forge_for(ledger, o.forge), timer=timer, record=record,
            delta_url_base=o.delta_url_base, delta_remote=o.delta_remote, prechecked=True,
            zeros="the trained weights equal the base: the delta is all zeros",
            zeros_hint="train first (`woolf train`)"))
        if o.weights is None:
            mark_submitted(ledger, result["id"])
        remember(ledger, result["id"], result.pop("pointer"), result.pop("declared"))
        return {**result, "error_feedback": ""}
    with timer("load"):
        # a float32 model is read and subtracted in numpy: torch is imported only if a step needs it
        base_w = ledger.load_weights(base, numpy="float32")  # hashed as read, if not verified yet
        as_numpy = npdelta.is_numpy(base_w)
        # finiteness is proven on the delta (base is the ledger's, finite; trained is finite iff
        # the delta is)
        trained = load_checked(Path(weights), cfg.limits, expect=spec_of(base_w),
                               label="trained weights", finite=False, numpy=as_numpy)
    the_forge = forge_for(ledger, o.forge)
    feedback_note = ""
    with timer("delta"):
        if as_numpy:
            delta = npdelta.subtract(trained, base_w, into=trained)  # trained's memory is reused
        else:
            from woolf.core.merge import compute_delta  # deferred: loads torch

            delta = compute_delta(trained, base_w, into=trained)
        if feedback:
            residual, feedback_note = settle(ledger, the_forge, spec_of(base_w))
            if residual is not None:  # what earlier PRs did not get merged rides along
                import torch  # deferred: torch

                delta = {k: (v.to(torch.float32) + residual[k]).to(v.dtype)
                         for k, v in to_torch(delta).items()}
        del trained, base_w
        check_delta(delta, "the trained weights equal the base: the delta is all zeros",
                    hint="train first (`woolf train`)")
    parts = kept = None
    if cspec is not None:
        with timer("compress"):
            delta = to_torch(delta)  # shares the arrays' memory
            if not all(t.is_floating_point() for t in delta.values()):
                raise UsageError("only a model whose tensors are all floating point can send a "
                                 "topk delta", hint="--compress dense")
            parts, kept, note = compress_with_feedback(ledger, delta, cspec, spec_of(delta),
                                                       o.compress_feedback)
            feedback_note = "; ".join(x for x in (feedback_note, note) if x)
    result = submit_delta(ledger, delta, base, SubmitDeltaOptions(
        who=who, message=o.message, the_forge=the_forge, timer=timer, record=record,
        delta_url_base=o.delta_url_base, delta_remote=o.delta_remote, cspec=cspec, parts=parts,
        prechecked=True))
    del delta, parts
    if o.weights is None:
        mark_submitted(ledger, result["id"])
    remember(ledger, result["id"], result.pop("pointer"), result.pop("declared"))
    keep_residual(ledger, kept, cspec)  # what top-k dropped rides in the next delta
    if feedback_note:
        clear_residual(ledger, result["id"])  # it is part of this PR's delta now
    return {**result, "error_feedback": feedback_note}


def _streamed_delta(ledger, base, weights: Path, timer: Timer):
    """A StreamedDelta of ``weights`` on ``base`` when the model is all float32 (else None: the whole
    models are loaded, as for other dtypes, error feedback and top-k)."""
    with timer("load"):
        base_path = ledger.weights_path(base)  # sha256-verified (hashed once, if new here)
        spec = read_spec(base_path, TRUSTED_LIMITS, f"version {base.version}")
        if not npdelta.all_float32(spec):
            return None
        return StreamedDelta(weights, base_path, ledger.config.limits, spec)
