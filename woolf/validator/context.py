"""What one validator works with: its ledger, forge, device, name and state, in one object.

Usage:
    ctx = ValidatorContext(ledger, forge, device="cpu", name="ci-gpu-1")   # Validator builds one: v.ctx
    verdict, step = woolf.validator.step.evaluate(ctx, pr, main, timer)     # every step is a plain
    woolf.validator.quorum.vote_one(ctx, sub_id)                           # function over it
    ctx = context_of(v)                                                     # a Validator's, or ctx itself

The steps (delta_load.py, step.py, the stages of stages.py, quorum.py) and the CI jobs (ci.py) take it
as their first argument; nothing else is shared between them (what a validator remembers: ``state``).
``judge`` is how a vote's judgment is made (quorum.judge when None): the demo's dishonest validator
(woolf/demo/dishonest.py) plugs its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from woolf.validator.state import ValidatorState


@dataclass
class ValidatorContext:
    ledger: Any  # woolf.ledger.Ledger, its main_ref on origin's main
    forge: Any  # woolf.forges.base.Forge: where the PRs live
    device: str  # resolved (woolf.workloads.base.resolve_device)
    name: str  # the name in its verdicts (Woolf-Validator)
    state: ValidatorState = field(default_factory=ValidatorState)  # what it remembers: state.py
    # (ctx, pr, main, timer) -> (verdict or None, step, candidate sha256): a vote's judgment; None: quorum.judge
    judge: Callable | None = None


def context_of(v) -> ValidatorContext:
    """``v`` itself when it is a ValidatorContext, else the context of the Validator ``v``."""
    return v if isinstance(v, ValidatorContext) else v.ctx
