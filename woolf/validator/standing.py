"""The norm guard's bound by standing: keyless or new names do not set it.

Usage (screen_delta's hook, after the guard's own median limit; over the validator's context):
    bound = standing_bound(ctx, main, median_limit, model_norm)   # core.bounds.NormBound or None
    bound.limit, bound.note

Contributors with standing are those with a key in main's allowed_signers: a merge recorded under
a keyed name carries that key's signature (an unsigned PR naming a keyed contributor is nobody's).
Their recent merged norms (one median each, the newest `scoring.norm_window` of them among the last
STANDING_LOOKBACK merges) set a reference that Sybils' tiny merges cannot lower; the model's own norm
sets a floor (core/bounds.py FLOOR_RATIO). Read once per main head (the validator's ``state.standing``).
"""

from __future__ import annotations

import statistics

from woolf.core.bounds import NormBound, norm_bound
from woolf.core.fairness import canonical
from woolf.ledger.verdicts import merged_records
from woolf.protocol.rules.flood import keyed_names

STANDING_LOOKBACK = 256  # merges searched for keyed contributors' norms


def standing_norms(ctx, main) -> list[float]:
    """One median merged norm per keyed contributor, newest contributors first (at most norm_window)."""
    ledger, cache = ctx.ledger, ctx.state.standing
    if main.commit in cache:
        return cache[main.commit]
    names, _ = keyed_names(ledger.git, main.commit)
    keyed = {canonical(n) for n in names}
    most = ledger.config.scoring.norm_window
    by: dict[str, list[float]] = {}
    for r in merged_records(ledger, limit=STANDING_LOOKBACK, ref=main.commit):
        n = r.delta_norm
        if r.contributor not in keyed or not isinstance(n, (int, float)) or not n > 0 or n == float("inf"):
            continue
        if r.contributor in by or len(by) < most:
            by.setdefault(r.contributor, []).append(float(n))
    found = [statistics.median(v) for v in by.values()]
    if len(cache) > 64:
        cache.clear()
    cache[main.commit] = found
    return found


def standing_bound(ctx, main, median_limit: float | None, model_norm: float) -> NormBound | None:
    """The guard's limit: its median's, raised to the keyed contributors' and to the model's floor."""
    multiple = ctx.ledger.config.scoring.norm_multiple
    if multiple <= 0:
        return None
    return norm_bound(median_limit, standing_norms(ctx, main), model_norm, multiple)
