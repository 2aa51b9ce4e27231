"""The one path that opens a PR: a delta on a version, uploaded and verified, then the ref pushed.

Usage:
    check_delta(delta, "the delta is all zeros")          # NaN/Inf or all zeros: InvalidWeightsError
    pr = submit_delta(ledger, delta, base, SubmitDeltaOptions(who="alice", the_forge=forge))
    pr = submit_delta(ledger, StreamedDelta(trained, base_path, limits, spec), base, ...)  # tensor by tensor

`woolf submit` (participant/submit.py) and `woolf revert` (history/revert.py) both come here,
so every PR has the same shape whoever opens it.
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from woolf.core.finite import scan
from woolf.errors import InvalidWeightsError
from woolf.forges.base import Forge
from woolf.ledger.tasks import record_submitted, submitted_update
from woolf.protocol import layout
from woolf.protocol.compress_spec import CompressSpec
from woolf.protocol.trailers import format_message
from woolf.protocol.versions import Version
from woolf.storage.dvcstore import REMOTE_NAME
from woolf.storage.kinds import DENSE, kind_for
from woolf.storage.streamdelta import StreamedDelta, ZeroDelta
from woolf.timing import Timer

# a place on the submitter's machine: an absolute path, a home-relative one, a drive letter, a file: URL;
# at the start of a value or after a separator (a shard label "domain 1/3:alice@v0" is none)
_PLACE = re.compile(r"(?:^|[\s'\"=:(,\[])(?:/[^\s/]|~[/\\]|[A-Za-z]:[\\/]|file:)")
MAX_PUBLIC_DEPTH = 8


def public(value, depth: int = 0):
    """``value`` (a training summary, as a workload or an external command wrote it) as a PR publishes it:
    every string that names a place on the submitter's machine is "private". A PR's objects are public
    for good (git keeps history); nothing in them may say where a participant keeps its files."""
    if isinstance(value, str):
        return "private" if _PLACE.search(value) else value
    if depth >= MAX_PUBLIC_DEPTH:
        return None
    if isinstance(value, dict):
        return {k: public(v, depth + 1) for k, v in value.items() if not _PLACE.search(str(k))}
    if isinstance(value, (list, tuple)):
        return [public(v, depth + 1) for v in value]
    return value


def check_delta(delta: dict, zeros: str, hint: str | None = None) -> None:
    """NaN/Inf or all zeros are refused; one norm per tensor proves both (woolf/core/finite.py)."""
    bad, nonzero = scan(delta)
    if bad is not None:
        raise InvalidWeightsError(f"delta: tensor {bad!r} holds NaN or Inf values")
    if not nonzero:
        raise InvalidWeightsError(zeros, hint=hint)


def _public_recipe(recipe: dict) -> dict:
    """The recipe without a local file's place: a carried optimizer start is published by its hashes only
    (participant/recipe.py publish() removes the snapshot's path; one that was not published loses it here)."""
    opt = recipe.get("optimizer")
    if isinstance(opt, dict) and "path" in opt:
        recipe = {**recipe, "optimizer": {k: v for k, v in opt.items() if k != "path"}}
    return recipe


def new_id(who: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    return f"{now:%Y%m%dT%H%M%S}{now.microsecond // 1000:03d}Z-{who}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class SubmitDeltaOptions:
    """Who opens the PR, through what, and what else it carries (`submit_delta`'s options)."""

    who: str  # the contributor id the PR is opened as
    the_forge: Forge  # the forge that opens it (woolf/forges/)
    message: str = ""  # the PR's note (its commit body and submission.json)
    timer: Timer = field(default_factory=Timer)  # where save/upload/git timings go
    record: dict | None = None  # `train`'s trained.json: its training, metrics and task
    delta_url_base: str | None = None  # a fork's public storage URL, named in submission.json
    delta_remote: str | None = None  # the DVC remote to upload to; None: the ledger's
    reverts: Version | None = None  # the PR takes back that merge (history/revert.py)
    cspec: CompressSpec | None = None  # send the delta compressed (topk) by this spec
    parts: dict | None = None  # with ``cspec``: the delta's compressed parts, made already
    prechecked: bool = False  # the caller already ran check_delta on the delta
    zeros: str | None = None  # a streamed delta that is all zeros: this refusal (and hint)
    zeros_hint: str | None = None
    seal: Callable[[dict, str], dict] | None = None  # (recipe, the delta's sha256) -> the recipe sent: its
    # proof of training bound to the delta (participant/proof.py)


def submit_delta(ledger, delta: dict, base, o: SubmitDeltaOptions) -> dict:
    """Open a PR carrying ``delta`` on version ``base``: upload and verify it, then push the ref.

    With ``cspec``/``parts`` the delta goes as a
    compressed (topk) file of those parts. ``reverts`` (a Version): the PR takes back that merge
    (woolf/history/revert.py); it is named in submission.json and in a ``Woolf-Reverts``
    trailer, and judged like any PR.
    """
    who, timer, reverts, cspec, parts = o.who, o.timer, o.reverts, o.cspec, o.parts
    record = o.record or {}
    cfg = ledger.config
    own = getattr(delta, "declared", None)  # a file that writes itself as its kind (storage/kinds/lora_file.py)
    streamed = isinstance(delta, StreamedDelta) or own is not None  # written by its own write()
    declared = own or (cspec.declared() if cspec else DENSE.declared())
    kind = kind_for(declared)
    if not o.prechecked and not streamed:
        check_delta(delta, "the delta is all zeros: it would change nothing")
    sub_id = new_id(who)
    delta_rel, ptr_rel, meta_rel = layout.submission_paths(sub_id)
    tmp = ledger.root / layout.WORK / "outgoing" / f"{sub_id}.safetensors"
    with timer("save"):  # hashed while written: md5 for DVC, sha256 for the record
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            md5, sha = kind.write(delta, tmp, declared, parts)
        except ZeroDelta:
            raise InvalidWeightsError(o.zeros or "the delta is all zeros: it would change nothing",
                                      hint=o.zeros_hint) from None
        del delta, parts
    size = tmp.stat().st_size
    if size > cfg.limits.max_delta_bytes:
        tmp.unlink()
        raise InvalidWeightsError(f"the delta is {size} bytes, over the ledger's limit of "
                                  f"{cfg.limits.max_delta_bytes}")
    with timer("upload"):
        # uploaded and verified; a fork's contributor uploads to a DVC remote of their own
        pointer = ledger.store.put(tmp, Path(delta_rel).name, md5=md5, sha256=sha,
                                   remote=o.delta_remote or REMOTE_NAME)
    meta = {
        "schema": 1, "id": sub_id, "contributor": who, "base_version": base.version,
        "base_commit": base.commit, "message": o.message,
        "delta": {**declared, "sha256": sha, "md5": md5, "size": size},
        "training": public(record.get("training")), "metrics": record.get("metrics"),
    }
    if record.get("recipe"):  # how the delta was trained (protocol/recipe.py), signed with the PR
        recipe = _public_recipe(record["recipe"])
        meta["recipe"] = o.seal(recipe, sha) if o.seal else recipe  # its proof's chain ends at this delta
    if o.delta_url_base:  # a fork's contributor cannot write to the ledger's storage: say where
        meta["delta"]["url"] = f"{o.delta_url_base.rstrip('/')}/files/md5/{md5[:2]}/{md5[2:]}"
    if reverts is not None:
        meta["reverts"] = {"version": reverts.version, "commit": reverts.commit}
    commit_msg = format_message(f"woolf: submission {sub_id}",
                                {"Woolf-Submission": sub_id, "Woolf-Contributor": who,
                                 "Woolf-Base-Version": base.version, "Woolf-Delta-Sha256": sha,
                                 "Woolf-Reverts": None if reverts is None else reverts.version,
                                 "Woolf-Task": record.get("task")},  # the task it trained under
                                body=o.message)
    with timer("git"):
        commit = ledger.git.commit_tree_with(
            base.commit,
            {ptr_rel: pointer.render(), meta_rel: json.dumps(meta, indent=2, sort_keys=True).encode() + b"\n"},
            commit_msg, parents=[base.commit],
        )
        task = record.get("task")
        # the task's submitted record rides the push that opens the PR (one push, one run of the hub's hooks)
        also = submitted_update(ledger, task, sub_id) if task and o.the_forge.records_ride_prs else None
        pr = o.the_forge.open(sub_id, commit, also=[also] if also else None)
    if task and (also is None or ledger.git.rev_parse(also[1]) != also[0]):  # it did not ride: on its own
        record_submitted(ledger, task, sub_id)
    return {"id": sub_id, "base_version": base.version, "commit": commit, "contributor": who,
            "delta_sha256": sha, "delta_md5": md5, "delta_size": size, "delta_kind": meta["delta"]["kind"],
            "number": pr.number,
            "timings": dict(timer), "pointer": pointer, "declared": meta["delta"], "recipe": meta.get("recipe")}
