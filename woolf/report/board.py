"""The leaderboard and the credit: who made the model good, recomputed from git alone.

Usage:
    rows = leaderboard(ledger)          # [{"contributor", "mu", "sigma", "ordinal", "merged", "rejected", ...}]
    rows = credit(ledger, since=3)      # [{"contributor", "credited", "improvement", "share", "versions"}]

Ratings: woolf/core/ratings.py over the verdict history (woolf/ledger/verdicts.py). Credit
(CREDIT_RULE): each merged version's benchmark improvement (before - after, as its validator
recorded them) goes to its author, bounded in both directions by the typical improvement of
the merges around it (typical_gains: the median over the nearest RATING_WINDOW merges that
improved). The first merges from genesis drop the loss by whole nats that any delta would
have given, which is what the ledger reaches anyway, whoever merges first. A regression is
bounded alike: capping gains but not losses made a substantive delta's benchmark noise (+-0.01
nats a merge when continuing a pretrained model, where the typical gain is 0.002) count
against its author, and gave two honest participants 0% of the credit and a flooder and a
free-rider all of it in a quick adversarial demo (benchmarks/RESULTS.md §7). A contributor's
share is its net credit over the sum of the net credits that are positive: shares lie in
[0, 100%] and add up to 100%; one whose merges hurt more than they helped gets 0% (its
negative credit is still shown). Dividing by the signed total instead gave shares like 195%
and -95% when regressions nearly cancelled the gains.
"""

from __future__ import annotations

from woolf.core.ratings import match_size, rate
from woolf.errors import WoolfError
from woolf.ledger.verdicts import merged_records, rejected_records, verdict_history
from woolf.protocol.recipe import RETRAIN_FLAG

RATING_WINDOW = 8  # merges around each one whose median caps its credit (typical_gains)


def leaderboard(ledger, forge=None, window: int | None = None, history=None) -> dict:
    """{"rows": [...] best first, "timeline": [...], "window": n} from every verdict on record; ``window``
    verdicts per match (None: core/ratings.py's match_size, twice the number of contributors, at least 8)."""
    history = verdict_history(ledger, forge) if history is None else history
    rated = [(r.contributor, r.state, r.scores, r.reason) for r in history if r.rated and r.contributor]
    window = match_size(rated) if window is None else window
    table, timeline = rate(rated, window)
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
        row["retrain_failed"] = row.get("retrain_failed", 0) + (RETRAIN_FLAG in rec.flags)
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


CREDIT_RULE = ("credit: each merged version's benchmark improvement or regression, bounded by the median "
               f"improvement of the {RATING_WINDOW} merged versions nearest it (a larger drop is the easy early "
               "one any merge at that point would have made: the ledger reaches it anyway, whoever merges "
               "first; a larger rise is mostly the benchmark's noise); shares divide the positive net credits "
               "(a contributor whose merges net hurt gets 0%)")


def _rejected(ledger) -> list:
    try:
        return rejected_records(ledger)
    except WoolfError:  # no forge to read rejections from: credit is merged versions only
        return []


def typical_gains(gains: list[float], near: int = RATING_WINDOW) -> list[float | None]:
    """For each merge (in version order), the median improvement of the ``near`` merges nearest it (itself
    included), over those that improved; None when none of them did."""
    out = []
    for i in range(len(gains)):
        lo = max(0, min(i - near // 2, len(gains) - near))
        ups = sorted(g for g in gains[lo:lo + near] if g > 0)
        out.append(None if not ups else (ups[(len(ups) - 1) // 2] + ups[len(ups) // 2]) / 2)
    return out


def credit(ledger, since: int | None = None, records=None) -> dict:
    """{"rows": [...] largest share first, "total": credited improvement, "improvement": raw total,
    "versions": n, "since": since, "rule": CREDIT_RULE}; each row's "share" in [0, 1] (None: no positive
    net credit)."""
    policy = ledger.config.policy
    given = records is not None
    records = merged_records(ledger) if records is None else records
    merges = sorted(((rec, rec.improvement(policy.metric, policy.direction)) for rec in records
                     if rec.version is not None), key=lambda rg: rg[0].version)
    merges = [(rec, g) for rec, g in merges if g is not None]
    caps = typical_gains([g for _, g in merges])  # over the whole history: --since only chooses what is counted
    rows: dict[str, dict] = {}
    total, raw, counted = 0.0, 0.0, 0
    for (rec, gain), cap in zip(merges, caps, strict=True):
        if since is not None and rec.version <= since:
            continue
        credited = max(-cap, min(cap, gain)) if cap is not None else gain
        counted += 1
        total, raw = total + credited, raw + gain
        row = rows.setdefault(rec.contributor, {"contributor": rec.contributor, "credited": 0.0, "improvement": 0.0,
                                                "versions": 0, "regressions": 0})
        row["credited"] += credited
        row["improvement"] += gain
        row["versions"] += 1
        row["regressions"] += gain < 0
    positive = sum(max(0.0, r["credited"]) for r in rows.values())
    for row in rows.values():
        row["share"] = max(0.0, row["credited"]) / positive if positive > 0 else None
    for rec in (_rejected(ledger) if not given else []):  # failed re-trainings, shown
        if RETRAIN_FLAG in rec.flags and rec.contributor:
            rows.setdefault(rec.contributor, {"contributor": rec.contributor, "credited": 0.0, "improvement": 0.0,
                                              "versions": 0, "regressions": 0, "share": None})
            rows[rec.contributor]["retrain_failed"] = rows[rec.contributor].get("retrain_failed", 0) + 1
    ordered = sorted(rows.values(), key=lambda r: (-r["credited"], -r["improvement"], r["contributor"]))
    return {"rows": ordered, "total": total, "improvement": raw, "versions": counted, "since": since,
            "metric": policy.metric, "rule": CREDIT_RULE}
