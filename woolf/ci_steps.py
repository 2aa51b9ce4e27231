"""Validation split in two for CI: evaluate without write access, then apply with it.

Usage:
    record = evaluate_pr(Validator(ledger, forge_kind="github"), sub_or_number)   # unprivileged job
    verdict = apply_record(Validator(ledger, forge_kind="github"), record)         # privileged job

The apply step re-checks the head SHA, main and the cheap checks, recomputes the
deterministic merge (never re-evaluates), uploads the weights and fast-forwards
main. If the PR's head or main moved since evaluation it refuses: nothing is
merged that was not evaluated, and the next run evaluates again.
"""

from __future__ import annotations

from woolf.admission import Rejected, admit
from woolf.errors import UsageError
from woolf.timing import Timer
from woolf.validator import Verdict

RECORD_KEYS = {"schema", "id", "head", "main", "accepted", "reason", "staleness", "attenuation",
               "metrics", "base_version", "contributor", "timings"}


def _resolve(v, ref: str) -> str:
    """A submission id, or a PR number on forges that have them."""
    if ref.isdigit():
        for pr in v.forge.list():
            if pr.number == int(ref):
                return pr.id
        raise UsageError(f"no submission PR #{ref}")
    return ref


def evaluate_pr(v, ref: str) -> dict:
    pr, main = v.fresh(_resolve(v, ref))
    if pr.state != "open":
        raise UsageError(f"{pr.id} is {pr.state}; nothing to evaluate")
    timer = Timer()
    verdict, _ = v.evaluate(pr, main, timer)
    return {"schema": 1, "id": pr.id, "head": pr.head, "main": main.commit, "accepted": verdict.accepted,
            "reason": verdict.reason, "staleness": verdict.staleness, "attenuation": verdict.attenuation,
            "metrics": verdict.metrics, "base_version": verdict.base_version,
            "contributor": verdict.contributor, "timings": dict(timer)}


def apply_record(v, record: dict) -> Verdict | None:
    if not isinstance(record, dict) or set(record) != RECORD_KEYS or record["schema"] != 1:
        raise UsageError("not a verdict record written by `woolf validate --evaluate-only`")
    pr, main = v.fresh(record["id"])
    if pr.state != "open":
        return None
    if pr.head != record["head"]:
        raise UsageError(f"{pr.id}'s head moved since evaluation; it must be evaluated again")
    if main.commit != record["main"]:
        raise UsageError("main moved since evaluation; the PR must be evaluated again at the new main")
    timer = Timer()
    verdict = Verdict(pr.id, record["accepted"], "merged" if record["accepted"] else "rejected",
                      record["reason"], record["contributor"], record["base_version"],
                      staleness=record["staleness"], attenuation=record["attenuation"],
                      metrics=record["metrics"], timings=record["timings"])
    with timer("checks"):
        try:
            adm = admit(v.ledger, pr, main, v._merged_deltas(main))
        except Rejected as exc:
            verdict.accepted, verdict.state, verdict.reason = False, "rejected", exc.message
    if not verdict.accepted:
        v.forge.reject(pr, verdict.reason, v._fields(verdict, timer))
        return verdict
    if adm.staleness != verdict.staleness:
        raise UsageError("staleness differs from the evaluation's; evaluate again")
    _, step = v.candidate(adm, main, verdict.attenuation, timer)  # recomputed, never re-evaluated
    v.merge(pr, main, verdict, step, timer)
    return verdict
