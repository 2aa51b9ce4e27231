"""The candidate written and hashed in a helper thread while it is evaluated.

Usage (validator/step.py starts and cancels, validator/publish.py takes):
    start_ahead(ctx, pr_id, step.candidate)   # after the merge: save_atomic(hashed=True) in a helper thread
    got = take_ahead(ctx, pr_id, step.candidate)   # (path, md5, sha256) once written, or None
    cancel_ahead(ctx)                         # a verdict that publishes nothing: stopped, its file removed

The upload's work (the candidate's file written once, md5 and sha256 on the way: storage/writer.py)
does not need the verdict, only the merged weights: it starts when they exist and overlaps the
candidate's evaluation (on a GPU runner the evaluation leaves the CPU idle). Nothing of it is
published before the verdict: the file sits in the validator's work directory until publish.merge
moves it into the cache and storage after an acceptance (the push follows, as before), and is
removed otherwise. The writer holds the candidate's tensors only until it is done or cancelled
(cancel waits for it: never two models in memory); evaluation only reads them.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from woolf.protocol import layout
from woolf.storage.weights import save_atomic
from woolf.storage.writer import Stopped
from woolf.validator.context import ValidatorContext

_POOL: list[ThreadPoolExecutor] = []


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="woolf-ahead"))
    return _POOL[0]


@dataclass
class Ahead:
    pr_id: str
    weights: dict  # the candidate being written (identity: publish takes it only for these weights)
    path: Path
    stop: threading.Event
    future: Future


def candidate_path(ctx: ValidatorContext, pr_id: str) -> Path:
    return ctx.ledger.root / layout.WORK / "validator" / f"candidate-{pr_id}.safetensors"


def start_ahead(ctx: ValidatorContext, pr_id: str, weights: dict) -> None:
    """Write ``weights`` as PR ``pr_id``'s candidate file, hashed on the way, in a helper thread."""
    cancel_ahead(ctx)
    path, stop = candidate_path(ctx, pr_id), threading.Event()
    future = _pool().submit(save_atomic, weights, path, durable=False, hashed=True, stop=stop)
    ctx.state.ahead = Ahead(pr_id, weights, path, stop, future)


def take_ahead(ctx: ValidatorContext, pr_id: str, weights: dict) -> tuple[Path, str, str] | None:
    """(file, md5, sha256) of ``weights`` written ahead for ``pr_id``, once done; None when none was
    (then the caller writes them itself). An error of the write is raised here."""
    ahead = ctx.state.ahead
    if ahead is None or ahead.pr_id != pr_id or ahead.weights is not weights:
        cancel_ahead(ctx)
        return None
    ctx.state.ahead = None
    md5, sha = ahead.future.result()
    return ahead.path, md5, sha


def cancel_ahead(ctx: ValidatorContext) -> None:
    """Stop a candidate being written ahead, wait for its thread, remove its file."""
    ahead, ctx.state.ahead = ctx.state.ahead, None
    if ahead is None:
        return
    ahead.stop.set()
    try:
        ahead.future.result()
    except (Stopped, Exception):  # noqa: BLE001 - nothing is published from it: a failed write only needs cleaning
        pass
    ahead.path.unlink(missing_ok=True)
