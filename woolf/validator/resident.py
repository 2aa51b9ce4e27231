"""Main's weights kept in memory between PRs: the version this validator merged last.

Usage (validator/step.py takes, validator/publish.py keeps):
    current, norm = take_main(ctx, main)          # resident weights when main is still that commit, else read
    keep_main(ctx, commit, step.candidate, after)  # after the push: the new version stays, and its metrics

A validator that merged version N wrote those weights, hashed them and pushed them: the next PR of its
pass (or of the next `--watch` pass) is merged onto them without reading or hashing them again. They
are used only while main's head is that very commit: main moved by another validator, a revert, or a
fetch that found anything else reads main from storage (sha256-verified) as before. ``take_main``
empties the slot: whoever took the weights owns them (the merge writes the candidate into them), and
only a push puts weights back (a PR refused by its checks, before the merge, gives main back
unchanged). Under a quorum nothing is kept: judged steps stay in memory there already.
"""

from __future__ import annotations

from woolf.validator.context import ValidatorContext
from woolf.validator.state import Resident


def take_main(ctx: ValidatorContext, main) -> tuple[dict, float | None]:
    """(main's weights, their norm or None): the resident copy when main's head is still the version
    this validator merged last, else read (sha256-verified). Taken either way: the caller owns them."""
    resident, ctx.state.resident = ctx.state.resident, None
    if resident is not None and resident.commit == main.commit:
        return resident.weights, resident.norm
    del resident  # main moved (another validator merged, a revert): dropped before main is read
    return ctx.ledger.load_weights(main), None  # sha256-verified (hashed as read, if new here)


def give_back(ctx: ValidatorContext, main, weights: dict, norm: float | None) -> None:
    """Main's weights, untouched (a PR refused before its merge), kept for the next PR."""
    ctx.state.resident = Resident(main.commit, weights, norm)


def keep_main(ctx: ValidatorContext, commit: str, weights: dict, metrics: dict | None) -> None:
    """The version just pushed (``weights``: what was written as it) stays as the next PR's main, and
    its benchmark metrics (``metrics``: measured on the same benchmark as main's) as its "before"."""
    if ctx.ledger.config.validators.quorum > 1:  # a quorum keeps judged steps in memory: it reads main
        return
    ctx.state.resident = Resident(commit, weights)
    if metrics is not None:
        ctx.state.eval_cache[commit] = metrics
