"""A participant's submit: the delta from the version it trained on, checked, compressed and sent as a PR.

Usage:
    pr = submit(ledger, SubmitOptions(message="60 steps on my shard"))  # -> {"id": .., "base_version": ..}
    pr = submit(ledger, SubmitOptions(weights=Path("mine.safetensors"), base_version=3))

Takes one options object (None: its defaults). A dense float32
delta is computed, checked and written tensor by tensor (storage/streamdelta.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from woolf.core import npdelta
from woolf.errors import UsageError
from woolf.forges import forge_for
from woolf.ledger.submission import SubmitDeltaOptions, check_delta, submit_delta
from woolf.participant.cleanup import after_submit
from woolf.participant.feedback import clear_residual, remember, settle
from woolf.participant.lora import submit_lora
from woolf.participant.proof import carried_residual, keep_run, seal
from woolf.participant.recipe import publish
from woolf.participant.residual import compress_with_feedback, compression_spec, keep_residual
from woolf.participant.state import (
    mark_submitted,
    waiting_result,
    work_dir,
)
from woolf.participant.verifiable import retrain_note
from woolf.protocol import layout
from woolf.protocol.contributor import contributor_id
from woolf.storage import kinds
from woolf.storage.streamdelta import StreamedDelta
from woolf.storage.weights import (
    TRUSTED_LIMITS,
    load_checked,
    read_spec,
    spec_of,
    to_torch,
)
from woolf.timing import Timer


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
    recipe: dict | None = None  # with weights: the recipe they were trained by (protocol/recipe.py); None: train's


def _trained(ledger) -> tuple[dict, Path, int]:
    """(the record `woolf train` left, its weights' path, its base version); UsageError when there is
    none, or it was submitted already."""
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
    return record, work_dir(ledger) / "trained.safetensors", record["base_version"]


def _base(ledger, base_version: int | None, record: dict):
    """The base version on origin's main (fetched now): ``base_version``, else local main's head; the
    one ``record``'s weights were trained from, when there is a record."""
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
    return base


def submit(ledger, options: SubmitOptions | None = None) -> dict:
    """Delta = trained - base, checked, compressed (``compress`` or delta.compress), uploaded and
    verified, then the PR ref is pushed. A top-k delta keeps what it dropped for the next one.
    ``options``: a SubmitOptions (None: its defaults). Once the PR is open, what this clone no longer
    needs is removed (participant/cleanup.py): ``freed`` bytes."""
    o = options if options is not None else SubmitOptions()
    result, record = _submit(ledger, o)
    if o.weights is not None:  # weights from elsewhere: the work area is not this PR's
        record = {}
    return {**result, "freed": after_submit(ledger, record, result, o.delta_remote, work=o.weights is None)}


def _submit(ledger, o: SubmitOptions) -> tuple[dict, dict]:
    """``submit``: (its result, the record it sent)."""
    record: dict = {}
    weights, base_version = o.weights, o.base_version
    cspec = compression_spec(ledger.config, o.compress)  # a bad --compress is a usage error first
    if weights is None:
        record, weights, base_version = _trained(ledger)
    who = contributor_id(o.contributor or record.get("contributor"), ledger.git)
    dirty = ledger.git.out("status", "--porcelain", "--untracked-files=no")
    if dirty:
        raise UsageError(f"the checkout has uncommitted changes to ledger files:\n{dirty}",
                         hint="a submission carries only a delta; `git stash` or `git checkout .` "
                              "first")
    base = _base(ledger, base_version, record)
    if record.get("lora") and o.weights is None:  # the factors are sent, never a dense product
        result = submit_lora(ledger, record, who, base, o)
        note = retrain_note(ledger.config, record.get("recipe"), result["delta_kind"])
        return {**result, "unverifiable": note}, record
    cfg = ledger.config
    timer = Timer()
    feedback = cfg.workload.error_feedback if o.error_feedback is None else o.error_feedback
    streamed = _streamed_delta(ledger, base, Path(weights), timer) if cspec is None and not feedback else None
    record = publish({**record, **({"recipe": o.recipe} if o.recipe else {})},  # the recipe; error feedback
                     transform="error feedback" if feedback else None)  # makes the delta not the training's
    if streamed is not None:  # a dense float32 delta: computed, checked and written tensor by tensor
        result = submit_delta(ledger, streamed, base, SubmitDeltaOptions(
            who=who, message=o.message, the_forge=forge_for(ledger, o.forge), timer=timer, record=record,
            delta_url_base=o.delta_url_base, delta_remote=o.delta_remote, prechecked=True,
            zeros="the trained weights equal the base: the delta is all zeros",
            zeros_hint="train first (`woolf train`)", seal=seal))
        if o.weights is None:
            mark_submitted(ledger, result["id"])
        _keep(ledger, o, result, None)
        remember(ledger, result["id"], result.pop("pointer"), result.pop("declared"))
        note = retrain_note(cfg, record.get("recipe"), kinds.DENSE.name)
        return {**result, "error_feedback": "", "unverifiable": note}, record
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
    parts = kept = residual_in = None
    if cspec is not None:
        with timer("compress"):
            delta = to_torch(delta)  # shares the arrays' memory
            if not all(t.is_floating_point() for t in delta.values()):
                raise UsageError("only a model whose tensors are all floating point can send a "
                                 "topk delta", hint="--compress dense")
            parts, kept, note, residual_in = compress_with_feedback(ledger, delta, cspec, spec_of(delta),
                                                                    o.compress_feedback)
            feedback_note = "; ".join(x for x in (feedback_note, note) if x)
    result = submit_delta(ledger, delta, base, SubmitDeltaOptions(
        who=who, message=o.message, the_forge=the_forge, timer=timer, record=record,
        delta_url_base=o.delta_url_base, delta_remote=o.delta_remote, cspec=cspec, parts=parts,
        prechecked=True, seal=_sealer(ledger, residual_in, kept)))
    del delta, parts
    if o.weights is None:
        mark_submitted(ledger, result["id"])
    _keep(ledger, o, result, residual_in)
    remember(ledger, result["id"], result.pop("pointer"), result.pop("declared"))
    keep_residual(ledger, kept, cspec)  # what top-k dropped rides in the next delta
    if feedback_note:
        clear_residual(ledger, result["id"])  # it is part of this PR's delta now
    return {**result, "error_feedback": feedback_note,
            "unverifiable": retrain_note(cfg, record.get("recipe"), result["delta_kind"])}, record


def _sealer(ledger, residual_in: dict | None, kept: dict | None):
    """The recipe's proof bound to the delta and to the compression residual going in and out (top-k)."""
    def sealed(recipe: dict, sha: str) -> dict:
        from woolf.core.chain import component_digest  # deferred: torch

        went_in = component_digest(residual_in) if residual_in is not None else None
        return seal(recipe, sha, went_in, component_digest(kept) if kept is not None else None,
                    carried_residual(ledger, went_in))

    return sealed


def _keep(ledger, o: SubmitOptions, result: dict, residual_in: dict | None) -> None:
    """The run's proof states kept for answering audits of this PR (participant/proof.py)."""
    recipe = result.pop("recipe", None)
    if o.weights is None and recipe:
        from woolf.participant.prove import prune  # deferred: loads torch

        keep_run(ledger, work_dir(ledger), result["id"], recipe, residual_in)
        prune(ledger)  # the states of PRs settled since are not needed any more


def _streamed_delta(ledger, base, weights: Path, timer: Timer):
    """A StreamedDelta of ``weights`` on ``base`` when the model is all float32 (else None: the whole
    models are loaded, as for other dtypes, error feedback and top-k)."""
    with timer("load"):
        base_path = ledger.weights_path(base)  # sha256-verified (hashed once, if new here)
        spec = read_spec(base_path, TRUSTED_LIMITS, f"version {base.version}")
        if not npdelta.all_float32(spec):
            return None
        return StreamedDelta(weights, base_path, ledger.config.limits, spec)
