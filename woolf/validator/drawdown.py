"""The drawdown bound's reference: the best version ever reached in the window of
trust, not the best of a sliding window that tolerated regressions push along.

Usage (over the validator's context, woolf/validator/context.py):
    best = trusted_best(ctx, main)        # Best(value, version, since) or None
    reason = drawdown_reason(ctx, main, probe)   # None, or why the candidate is too far behind

The window of trust is main's first-parent history since the newest version that changed the
ledger's config or benchmark files (a maintainer's change may change what the metric measures;
version 0 when none did). Within it the best recorded metric only improves: 16 merges each
within the tolerated regression can no longer carry the loss 0.07 above the best (the old
reference, the best of the last `policy.window` versions, moved with them).

Cost: one walk of the window per main head at first, then one version per new head (the validator's
``state.best``, keyed by main's commit, extended from its first parent's entry).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from woolf.core.bounds import best_of
from woolf.core.scores import improvement
from woolf.protocol.config import CONFIG_PATH

TRUST_MAX = 100_000  # versions walked at most on a cold cache


@dataclass(frozen=True)
class Best:
    value: float
    version: int  # where it was reached
    since: int  # the first version of the window of trust


def _metric(metrics, name: str) -> float | None:
    x = (metrics or {}).get(name)
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def _better(a: Best | None, value: float | None, version: int, since: int, direction: str) -> Best | None:
    if value is None:
        return a
    if a is None or best_of([a.value, value], direction) != a.value:
        return Best(value, version, since)
    return a


def _changed_at(ledger, commit: str) -> str | None:
    """The newest commit on ``commit``'s first-parent chain that touched the config or benchmark."""
    bench = ledger.config.benchmark.path
    out = ledger.git.out("log", "-1", "--first-parent", "--format=%H", commit, "--", CONFIG_PATH, bench)
    return out.strip() or None


def _walk(ledger, main, metric: str, direction: str) -> Best | None:
    since_commit = _changed_at(ledger, main.commit)
    since = 0
    if since_commit:
        v = ledger.version_at(since_commit)
        since = v.version if v is not None else 0
    best = None
    count = min(TRUST_MAX, main.version - since + 1)
    for v in ledger.log(limit=count, ref=main.commit):
        if v.version < since:
            break
        best = _better(best, _metric(v.metrics, metric), v.version, since, direction)
    return best


def trusted_best(ctx, main) -> Best | None:
    """The best recorded policy metric on main since the window of trust began."""
    ledger, cache = ctx.ledger, ctx.state.best
    p = ledger.config.policy
    key = (main.commit, p.metric, p.direction)
    if key in cache:
        return cache[key]
    parent = main.parents[0] if main.parents else None
    prior = (parent, p.metric, p.direction)
    touched = parent is not None and bool(ledger.git.out("diff", "--name-only", parent, main.commit, "--",
                                                        CONFIG_PATH, ledger.config.benchmark.path).strip())
    if parent is not None and prior in cache and not touched:
        old = cache[prior]
        since = old.since if old is not None else main.version
        best = _better(old, _metric(main.metrics, p.metric), main.version, since, p.direction)
    else:
        best = _walk(ledger, main, p.metric, p.direction)
    if len(cache) > 4096:
        cache.clear()
    cache[key] = best
    return best


def drawdown_limit(policy) -> float:
    """policy.max_drawdown, where -1 (the default) is twice the tolerated regression (0 when none is)."""
    if policy.max_drawdown == -1:
        return 2 * max(0.0, -policy.min_improvement)
    return policy.max_drawdown


def drawdown_reason(ctx, main, probe: dict) -> str | None:
    """The candidate may never be more than `policy.max_drawdown` behind the best version reached."""
    p = ctx.ledger.config.policy
    got, limit = _metric(probe, p.metric), drawdown_limit(p)
    if not limit or got is None:
        return None
    best = trusted_best(ctx, main)
    if best is None:
        return None
    behind = improvement(got, best.value, p.direction)  # > 0: the candidate is worse than the best
    if behind > limit:
        return (f"{p.metric} {got:.4f} is {behind:.4f} behind the best version reached since version "
                f"{best.since} (version {best.version}, {best.value:.4f}), over policy.max_drawdown {limit:g}: "
                "tolerated regressions do not add up")
    return None
