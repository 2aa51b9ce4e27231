"""What a participant is told when its PR cannot be audited (`woolf train`, `woolf submit`).

Usage:
    note = retrain_note(ledger.config, record.get("recipe"), "lora")   # None, or one line to print

The reason comes from what validators ask (woolf/protocol/recipe.py ``unverifiable``, then the kind's
``unreplayable``: storage/kinds/), so what
`train` and `submit` say stays what validators record: a PR `woolf train` made carries its proof of
training (every kind, private data included), so these lines appear for weights trained elsewhere
(`submit --weights`: no recipe, no proof) and the like. Said only where it matters: when the ledger
audits (``validators.retrain_rate`` > 0) or refuses what it cannot audit (``policy.require_retrain``).
"""

from __future__ import annotations

from woolf.protocol.recipe import unverifiable
from woolf.storage import kinds


def retrain_note(cfg, recipe: dict | None, delta_kind: str) -> str | None:
    """One line about a PR of ``recipe`` and ``delta_kind`` that validators cannot audit; None when they
    can, or when the ledger does not audit."""
    rate, required = cfg.validators.retrain_rate, cfg.policy.require_retrain
    if rate <= 0 and not required:
        return None
    why = unverifiable(recipe) or kinds.get(delta_kind).unreplayable()
    if why is None:
        return None
    if required:
        return (f"this PR cannot be audited ({why}), and the ledger's policy.require_retrain is on: "
                "validators will refuse it")
    return (f"this PR cannot be audited ({why}): validators record it unverifiable "
            f"(validators.retrain_rate {rate:g}); under policy.require_retrain it would be refused")
