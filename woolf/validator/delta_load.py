"""A PR's delta fetched, hashed and opened for the validator: dense ones read tensor by tensor.

Usage:
    delta = load_delta(ctx, adm, model_spec)   # its kind's dense update (storage/kinds/); raises Rejected
    settle(delta)                              # its md5, when still being computed; raises Rejected if wrong

A dense delta linked from storage on this filesystem is read once for its tensors' content sha256 (the
replay check's), norms and sketches; its md5 (its storage address: storage is untrusted) and its file's
sha256 (the one submission.json declares) run in helper threads of their own (storage/dvcstore.py
``defer_md5``: ``delta.pending``), started once the merge is made (validator/step.py), beside the
candidate's evaluation. Its checks and its merge run on the bytes meanwhile; the verdict waits for
``settle`` (validator/step.py): an md5 that is not the pointer's or a sha256 that is not the declared
one rejects the PR with the reason the in-line checks give, whatever else was found, and what the
checks made of those bytes is dropped (the copy index's entry: validator/step.py).

``ctx`` is the validator's ValidatorContext (woolf/validator/context.py); only its ledger is read.

A lora delta, once its factor file passed every check and its sha256, is expanded once
(storage/kinds/lora.py ``expand_ahead``) into an anonymous file beside the object in the store's cache:
every later use reads the dense update back instead of expanding it again. The environment
variable ``WOOLF_LORA_EXPAND=each`` turns this off (benchmarks/lora_memory.py measures both).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import torch

from woolf.errors import IntegrityError, InvalidWeightsError, Rejected, StorageError
from woolf.storage.kinds import DeltaKind, kind_for
from woolf.storage.lazy import LazyTensors, read_hashed
from woolf.validator.admission import Admitted
from woolf.validator.context import ValidatorContext
from woolf.validator.copyindex import copy_index
from woolf.validator.intake import check_declared, download_budget

log = logging.getLogger(__name__)


def load_delta(ctx: ValidatorContext, adm: Admitted, expect_spec) -> dict[str, torch.Tensor]:
    """The PR's delta, its whole object's sha256 the one submission.json declares; raises Rejected."""
    cfg = ctx.ledger.config
    check_declared(adm.meta["delta"], expect_spec, cfg.limits)  # dense ones too (validator/intake.py)
    declared = adm.meta["delta"]
    kind = kind_for(declared)
    if kind.lazy:  # read tensor by tensor where it is used (a lora one: each target expanded, once)
        return _lazy_delta(ctx, adm, expect_spec, kind)

    def read(path, on_block):  # hashed as it is loaded when this clone has not hashed it yet
        # finiteness is proven by step's norm check (exact check only when that is not finite)
        return kind.load(path, declared, expect_spec, cfg.limits, finite=False, on_block=on_block)

    path, delta, problem = _fetch_delta(ctx, adm, read)
    _match_sha256(ctx, adm, path, problem)
    if delta is not None:
        return delta
    try:
        return read(path, None)
    except InvalidWeightsError as exc:
        raise Rejected(exc.message) from None


def _fetch_delta(ctx: ValidatorContext, adm: Admitted, read=None, defer: bool = False):
    """(path, what ``read`` loaded or None, ``read``'s problem with the bytes or None); raises Rejected
    when the object cannot be had whole. A URL's delta is only fetched (``read`` runs later).
    ``defer``: (path, loaded, problem, PendingObject or None): the hashes may still be running."""
    ledger = ctx.ledger
    cfg, declared = ledger.config, adm.meta["delta"]
    cached = ledger.store.cache_path(adm.pointer.md5).is_file()
    try:  # a keyless PR's download draws on the pass's budget (validator/intake.py; Deferred)
        with download_budget(ctx.state, adm, cfg.forge.delta_timeout, cached) as deadline:
            if "url" in declared:
                return (ledger.store.fetch_url(adm.pointer, declared["url"], replace(cfg.forge, delta_timeout=deadline),
                                               cfg.limits.max_delta_bytes), None, None) + ((None,) if defer else ())
            if defer and read is not None:
                path, loaded, pending = ledger.store.fetch_object(
                    adm.pointer, max_bytes=cfg.limits.max_delta_bytes, deadline=deadline, read=read, defer_md5=True)
                return path, loaded, None, pending
            got = ledger.store.fetch_object(adm.pointer, max_bytes=cfg.limits.max_delta_bytes,
                                            deadline=deadline, read=read)
            return ((got, None, None) if read is None else (*got, None)) + ((None,) if defer else ())
    except IntegrityError as exc:
        raise Rejected(f"delta object: {exc.message}") from None
    except StorageError as exc:
        raise Rejected(f"delta object unavailable: {exc.message}") from None
    except InvalidWeightsError as exc:  # the object is whole (hashed); its bytes are not a delta
        return (ledger.store.cache_path(adm.pointer.md5), None, exc.message) + ((None,) if defer else ())


def _match_sha256(ctx: ValidatorContext, adm: Admitted, path, problem: str | None) -> None:
    """The whole object's sha256 is the one submission.json declares; then ``problem``, if any, rejects."""
    md5, sha = ctx.ledger.store.hashes(path)
    if sha != adm.meta["delta"]["sha256"]:
        raise Rejected("delta bytes do not match the sha256 in submission.json")
    if problem is not None:
        raise Rejected(problem)


def settle(delta) -> None:
    """Wait for ``delta``'s storage hashes if they are still being computed (``delta.pending``); Rejected
    when its md5 is not its pointer's (the object is then not cached) or its sha256 not the declared one,
    with the reasons and in the order the in-line checks give. Nothing pending: returns at once."""
    pending = getattr(delta, "pending", None)
    if pending is None:
        return
    _refuse(pending, None, delta.declared_sha256)
    delta.pending = None


def _refuse(pending, problem: str | None, sha256: str) -> None:
    """The in-line checks' verdict on an object hashed beside its reader (``pending``): an md5 that is not
    the pointer's first, then a sha256 that is not ``sha256``, then ``problem`` (the reader's)."""
    try:
        pending.result()
    except IntegrityError as exc:
        raise Rejected(f"delta object: {exc.message}") from None
    if pending.sha256 != sha256:
        raise Rejected("delta bytes do not match the sha256 in submission.json")
    if problem is not None:
        raise Rejected(problem)


def _lazy_delta(ctx: ValidatorContext, adm: Admitted, expect_spec, kind: DeltaKind) -> LazyTensors:
    """A delta of a lazy kind, hashed, then read tensor by tensor whenever it is used (storage/lazy.py):
    the checks, the screen, scoring and the merge each hold one of its tensors at a time, never it all.
    Its file is opened before it is hashed: what is read later is the inode that was hashed."""
    stored, limits = kind.stores_update, ctx.ledger.config.limits
    # a file whose tensors are the update (dense): its content sha256 (the replay check's) from the read
    # that hashes the file, its md5 meanwhile in a helper thread (``pending``)
    # and its tensors' norms and sketches for the copy index (validator/copyindex.py as_read) from that read
    on_tensor = copy_index(ctx.state).as_read(adm.meta["delta"]["sha256"], expect_spec) if stored else None
    path, content, problem, pending = _fetch_delta(ctx, adm, (
        lambda p, on_block: read_hashed(p, limits, on_block, on_tensor=on_tensor)) if stored else None, defer=True)
    delta = None
    try:
        delta = kind.open(path, adm.meta["delta"], expect_spec, limits, "delta")
    except InvalidWeightsError as exc:  # the object is whole (hashed below); its bytes are not a delta
        problem = problem or exc.message
    if pending is not None:
        if problem is not None:
            _refuse(pending, problem, adm.meta["delta"]["sha256"])  # the hashes' verdict first, as in line
        delta.pending, delta.declared_sha256 = pending, adm.meta["delta"]["sha256"]
    else:
        _match_sha256(ctx, adm, path, problem)
    if stored:
        delta.content = content
    if os.environ.get("WOOLF_LORA_EXPAND", "once") != "each":
        try:  # checked and hashed: expanded now, once, not at each of its uses (a lora delta's targets)
            kind.expand_ahead(delta, path.parent)
        except OSError as exc:  # e.g. a full disk: each use expands it again (slower, the same bits)
            log.warning("%s delta: not expanded ahead (%s); each use expands it", kind.name, exc)
    return delta
