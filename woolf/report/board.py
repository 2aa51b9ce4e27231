"""The leaderboard and the credit: who made the model good, recomputed from git alone.

Usage:
    rows = leaderboard(ledger)          # [{"contributor", "mu", "sigma", "ordinal", "merged", "rejected", ...}]
    rows = credit(ledger, since=3)      # [{"contributor", "improvement", "share", "versions"}]

Ratings: woolf/core/ratings.py over the verdict history (woolf/ledger/verdicts.py). Credit:
each merged version's benchmark improvement (before - after, as its validator recorded
them) goes to its author; a regressing merge counts against its author. Shares are of the
ledger's total improvement over the versions counted.
"""

from __future__ import annotations

from woolf.core.ratings import rate
from woolf.ledger.verdicts import merged_records, verdict_history

RATING_WINDOW = 8  # verdicts per rating match


def leaderboard(ledger, forge=None, window: int = RATING_WINDOW, history=None) -> dict:
    """{"rows": [...] best first, "timeline": [...], "window": n} from every verdict on record."""
    history = verdict_history(ledger, forge) if history is None else history
    table, timeline = rate([(r.contributor, r.state, r.scores) for r in history if r.rated and r.contributor], window)
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


def credit(ledger, since: int | None = None, records=None) -> dict:
    """{"rows": [...] largest share first, "total": improvement, "versions": n, "since": since}."""
    policy = ledger.config.policy
    records = merged_records(ledger) if records is None else records
    rows: dict[str, dict] = {}
    total, counted = 0.0, 0
    for rec in records:
        if rec.version is None or (since is not None and rec.version <= since):
            continue
        gain = rec.improvement(policy.metric, policy.direction)
        if gain is None:
            continue
        counted += 1
        total += gain
        row = rows.setdefault(rec.contributor, {"contributor": rec.contributor, "improvement": 0.0,
                                                "versions": 0, "regressions": 0})
        row["improvement"] += gain
        row["versions"] += 1
        row["regressions"] += gain < 0
    for row in rows.values():
        row["share"] = row["improvement"] / total if total > 0 else None
    ordered = sorted(rows.values(), key=lambda r: (-r["improvement"], r["contributor"]))
    return {"rows": ordered, "total": total, "versions": counted, "since": since, "metric": policy.metric}
