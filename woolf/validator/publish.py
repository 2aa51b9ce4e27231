"""An accepted PR published: the candidate uploaded, then one atomic push of the version and its verdict.

Usage (over the validator's ValidatorContext, woolf/validator/context.py):
    merge(ctx, pr, main, verdict, step, timer)               # upload, then one atomic push

Nothing is pushed before every object it names is whole in storage (``_verify_stored``); a crash
before the push leaves storage with an object no ref names, never a ref without its object. After
the push, the candidate stays in memory as the next PR's main (validator/resident.py).
"""

from __future__ import annotations

from woolf.core.merge_rules import Rule, Step
from woolf.protocol import layout
from woolf.protocol.trailers import format_message
from woolf.storage.files import hashes_of_file
from woolf.storage.outer_state import save_state
from woolf.storage.pointer import Pointer
from woolf.storage.weights import save_atomic
from woolf.timing import Timer
from woolf.validator.ahead import candidate_path, take_ahead
from woolf.validator.context import ValidatorContext
from woolf.validator.resident import keep_main
from woolf.validator.step import verdict_trailers
from woolf.validator.verdict import Verdict, failpoint
from woolf.validator.windows import adopt


def _verify_stored(ctx: ValidatorContext, pr, main) -> None:
    """The delta and main's weights (and outer state) are whole in the ledger's storage before a push names them.

    An object deleted meanwhile (storage is not append-only, or someone erred)
    is uploaded again from this validator's verified cache; without a copy the
    merge stops with a StorageError and the PR stays in the queue.
    """
    d = pr.submission["delta"]
    ctx.ledger.store.ensure_remote(Pointer(d["md5"], d["size"], "delta.safetensors"))
    ctx.ledger.store.ensure_remote(ctx.ledger.pointer(main.commit))
    if ctx.ledger.git.show_bytes(f"{main.commit}:{layout.STATE_POINTER}") is not None:
        ctx.ledger.store.ensure_remote(ctx.ledger.pointer(main.commit, layout.STATE_POINTER))


def merge(ctx: ValidatorContext, pr, main, verdict: Verdict, step: Step, timer: Timer, extra: dict | None = None,
          also=None) -> None:
    """Upload the candidate (and outer state), then one atomic push of the version and the verdict.

    ``extra``: more trailers (the quorum's `Woolf-Votes`); ``also``: more ref updates in the
    same push (the quorum's last vote; woolf/validator/quorum.py)."""
    cfg = ctx.ledger.config
    rule = Rule.from_config(cfg.merge)
    work = ctx.ledger.root / layout.WORK / "validator"
    files: dict[str, bytes | None] = {}
    with timer("upload"):
        ahead = take_ahead(ctx, pr.id, step.candidate)  # written and hashed while it was evaluated
        if ahead is not None:
            tmp, md5, sha = ahead
        else:
            tmp = candidate_path(ctx, pr.id)
            md5, sha = save_atomic(step.candidate, tmp, durable=False, hashed=True)
        files[layout.POINTER] = ctx.ledger.store.put(tmp, "model.safetensors", md5=md5, sha256=sha).render()
        state_sha = None
        if step.state is not None:
            tmp = work / f"outer-{pr.id}.safetensors"
            save_state(step.state, tmp)
            smd5, state_sha = hashes_of_file(tmp)
            files[layout.STATE_POINTER] = ctx.ledger.store.put(
                tmp, "outer.safetensors", md5=smd5, sha256=state_sha).render()
        elif ctx.ledger.git.show_bytes(f"{main.commit}:{layout.STATE_POINTER}") is not None:
            files[layout.STATE_POINTER] = None  # the config switched to a rule without state
        if "url" in pr.submission["delta"]:  # a fork's delta joins the ledger's own storage
            ctx.ledger.store.upload_cached(Pointer(pr.submission["delta"]["md5"],
                                                    pr.submission["delta"]["size"], "delta.safetensors"))
        _verify_stored(ctx, pr, main)
    failpoint("after-upload")
    verdict.version = main.version + 1
    fields = {"Woolf-Version": verdict.version, "Woolf-Submission": pr.id,
              "Woolf-Reason": verdict.reason, "Woolf-Alpha": cfg.merge.alpha_base,
              "Woolf-Staleness-Function": cfg.merge.staleness.kind,
              "Woolf-Rule": rule.kind, "Woolf-Rule-Params": rule.params() or None,
              "Woolf-Delta-Sha256": pr.submission["delta"]["sha256"],
              "Woolf-Weights-Sha256": sha, "Woolf-State-Sha256": state_sha,
              "Woolf-Metrics-Probe": verdict.metrics.get("probe"),
              "Woolf-Reverts": (pr.submission.get("reverts") or {}).get("version"),  # admission checked it
              **verdict_trailers(ctx, verdict, timer), **(extra or {})}
    how = "buffered" if not step.applied else f"attenuation {verdict.attenuation:.3f}"
    message = format_message(
        f"woolf: version {verdict.version} from {verdict.contributor} "
        f"(staleness {verdict.staleness}, {how})", fields)
    commit = ctx.ledger.git.commit_tree_with(main.commit, files, message,
                                              parents=[main.commit, pr.head])
    failpoint("before-push")
    with timer("push"):
        ctx.forge.merge(pr, commit, main.commit, also=also)
    failpoint("after-push")
    keep_main(ctx, commit, step.candidate, verdict.metrics["after"])  # the next PR's main
    adopt(ctx, commit, pr.id, main.commit)  # and its loss on each benchmark window, when the gate measured them
    verdict.timings = dict(timer)
