"""The leaderboard and the credit: who made the model good, recomputed from git alone.

Usage:
    rows = leaderboard(ledger)          # [{"contributor", "mu", "sigma", "ordinal", "merged", "rejected", ...}]
    rows = credit(ledger, since=3)      # [{"contributor", "credited", "improvement", "share", "versions"}]

Ratings: woolf/core/ratings.py over the verdict history (woolf/ledger/verdicts.py). Credit
(CREDIT_RULE): each merged version's benchmark improvement (before - after, as its validator
recorded them) goes to its author in the proportion own_share gives: the part of what its
delta removed from its own assigned shard beyond every random shard. What training on any
data would have given (near genesis: nearly all of it) is what the ledger reaches anyway,
whoever merges first; a regressing merge counts against its author in full. Shares are of the
ledger's total credited improvement over the versions counted.
"""

from __future__ import annotations

import math

from woolf.core.ratings import rate
from woolf.ledger.verdicts import merged_records, verdict_history

RATING_WINDOW = 8  # verdicts per rating match


def leaderboard(ledger, forge=None, window: int = RATING_WINDOW, history=None) -> dict:
    """{"rows": [...] best first, "timeline": [...], "window": n} from every verdict on record."""
    history = verdict_history(ledger, forge) if history is None else history
    table, timeline = rate([(r.contributor, r.state, r.scores, r.reason) for r in history if r.rated], window)
    policy = ledger.config.policy
    rows = {}
    for rec in history:
        if not rec.contributor:
            continue
        row = rows.setdefault(rec.contributor, {"contributor": rec.contributor, "merged": 0, "rejected": 0,
                                                "improvement": 0.0, "flagged": 0, "mean_difference": None,
                                                "_diffs": []})
        row[rec.state] = row.get(rec.state, 0) + 1
        row["flagged"] += bool(rec.flags)
        if rec.state == "merged":
            row["improvement"] += rec.improvement(policy.metric, policy.direction) or 0.0
        d = (rec.scores or {}).get("difference")
        if isinstance(d, (int, float)) and not isinstance(d, bool):
            row["_diffs"].append(float(d))
    for who, row in rows.items():
        diffs = row.pop("_diffs")
        row["mean_difference"] = sum(diffs) / len(diffs) if diffs else None
        row.update(table[who].to_json() if who in table else {"mu": None, "sigma": None, "ordinal": None,
                                                              "windows": 0})
    ordered = sorted(rows.values(), key=lambda r: (-(r["ordinal"] if r["ordinal"] is not None else -1e9),
                                                   r["contributor"]))
    return {"rows": ordered, "timeline": timeline, "window": window, "verdicts": len(history)}


CREDIT_RULE = ("credit: each merged version's benchmark improvement, counted in the proportion of its delta's gain "
               "on its own assigned shard beyond every random shard (what training on any data gives, the ledger "
               "reaches anyway, whoever merges first); a regression counts against its author in full")


def _finite(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def own_share(scores: dict | None) -> float:
    """The part of a delta's own-shard gain that no random shard showed: (assigned - max random) / assigned,
    within [0, 1]; 1 for history from before scoring (no scores: the whole improvement, as it was)."""
    if not isinstance(scores, dict):
        return 1.0
    own = _finite(scores.get("assigned"))
    randoms = scores.get("randoms") if isinstance(scores.get("randoms"), list) else [scores.get("random")]
    randoms = [r for r in (_finite(x) for x in randoms[:16]) if r is not None]
    if own is None or not randoms:
        return 1.0
    if own <= 0:
        return 0.0
    return max(0.0, min(1.0, (own - max(randoms)) / own))


def credit(ledger, since: int | None = None, records=None) -> dict:
    """{"rows": [...] largest share first, "total": credited improvement, "improvement": raw total,
    "versions": n, "since": since, "rule": CREDIT_RULE}."""
    policy = ledger.config.policy
    records = merged_records(ledger) if records is None else records
    rows: dict[str, dict] = {}
    total, raw, counted = 0.0, 0.0, 0
    for rec in records:
        if rec.version is None or (since is not None and rec.version <= since):
            continue
        gain = rec.improvement(policy.metric, policy.direction)
        if gain is None:
            continue
        credited = gain * own_share(rec.scores) if gain > 0 else gain
        counted += 1
        total, raw = total + credited, raw + gain
        row = rows.setdefault(rec.contributor, {"contributor": rec.contributor, "credited": 0.0, "improvement": 0.0,
                                                "versions": 0, "regressions": 0})
        row["credited"] += credited
        row["improvement"] += gain
        row["versions"] += 1
        row["regressions"] += gain < 0
    for row in rows.values():
        row["share"] = row["credited"] / total if total > 0 else None
    ordered = sorted(rows.values(), key=lambda r: (-r["credited"], -r["improvement"], r["contributor"]))
    return {"rows": ordered, "total": total, "improvement": raw, "versions": counted, "since": since,
            "metric": policy.metric, "rule": CREDIT_RULE}
