"""What changed between two versions: the weights per tensor, who contributed, and the metric.

Usage:
    d = diff_versions(ledger, 2, 5)                 # or (5, 2): the change from the first to the second
    d["total"]["l2"], d["tensors"][0], d["between"], d["contributors"], d["metric"]
    diff_versions(ledger, 2, 5, evaluator=Evaluator(ledger, Path("b.txt")))   # also evaluate both now

``between`` lists the versions after the older one up to the newer one: each
merge with its contributor, PR and the version it reverts (if a revert), each
change with its reason. ``metric`` compares the metrics the validators
recorded (the ledger's benchmark at merge time), and with an evaluator, the
two versions' metrics on its data now.
"""

from __future__ import annotations

from collections import Counter

from woolf.core.tensordiff import diff_weights


def version_entry(v) -> dict:
    kind = "merge" if v.submission else ("genesis" if v.version == 0 else "change")
    out = {"version": v.version, "commit": v.commit, "kind": kind, "subject": v.subject}
    if v.submission:
        out.update(contributor=v.contributor, submission=v.submission, staleness=v.staleness,
                   base_version=v.base_version, reverts=v.reverts)
    return out


def _change(metric: str, ma: dict | None, mb: dict | None) -> dict:
    a = (ma or {}).get(metric)
    b = (mb or {}).get(metric)
    both = isinstance(a, (int, float)) and isinstance(b, (int, float))
    return {"a": a, "b": b, "change": (b - a) if both else None}


def diff_versions(ledger, a: int, b: int, evaluator=None) -> dict:
    va, vb = ledger.show(a), ledger.show(b)  # UnknownVersionError for a version that does not exist
    rows, total = diff_weights(ledger.load_weights(va), ledger.load_weights(vb))
    lo, hi = sorted((a, b))
    between = ([version_entry(v) for v in reversed(ledger.log(limit=hi - lo, ref=ledger.show(hi).commit))]
               if hi > lo else [])
    metric = ledger.config.policy.metric
    result = {
        "a": version_entry(va), "b": version_entry(vb), "tensors": rows, "total": total, "between": between,
        "contributors": dict(Counter(e["contributor"] for e in between if e["kind"] == "merge")),
        "prs": [e["submission"] for e in between if e["kind"] == "merge"],
        "metric": {"name": metric, "direction": ledger.config.policy.direction,
                   "recorded": _change(metric, va.metrics, vb.metrics)},
    }
    if evaluator is not None:
        result["metric"]["evaluated"] = {**_change(metric, evaluator.metrics(va), evaluator.metrics(vb)),
                                         **evaluator.summary()}
    return result
