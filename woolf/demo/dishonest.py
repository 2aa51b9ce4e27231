"""A dishonest validator for the demo and the tests: it votes to accept everything, with invented metrics.

Usage:
    DishonestValidator(ledger, name="v3").run()       # votes accept on every open PR

It runs the same checks and merge arithmetic as an honest validator where it
can (so its candidate sha256 looks plausible), then claims the candidate
improved the benchmark loss by half; a PR that fails admission gets a made-up
candidate hash. Alone it can never settle a PR under a quorum k > 1, and
`woolf validators` flags it for disagreeing with the settled outcomes.
"""

from __future__ import annotations

import hashlib

from woolf.validator.queue import Validator
from woolf.validator.quorum import candidate_sha256
from woolf.validator.step import evaluate


class DishonestValidator(Validator):
    """A Validator whose votes say what ``judge`` below invents (ValidatorContext.judge)."""

    def __init__(self, ledger, **kwargs):
        super().__init__(ledger, judge=judge, **kwargs)


def judge(ctx, pr, main, timer):
    """quorum.judge's (verdict, step, candidate sha256), with the verdict and metrics invented."""
    verdict, step = evaluate(ctx, pr, main, timer)
    before = dict(verdict.metrics.get("before") or {"loss": 10.0})
    invented = {k: (v * 0.5 if isinstance(v, (int, float)) else v) for k, v in before.items()}
    verdict.accepted, verdict.state = True, "merged"
    verdict.metrics = {"before": before, "after": invented}
    verdict.reason = "excellent improvement (invented)"
    sha = candidate_sha256(step) if step is not None else hashlib.sha256(pr.id.encode()).hexdigest()
    return verdict, step, sha
