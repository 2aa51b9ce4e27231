"""Validation split in two for CI: evaluate without write access, then apply with it.

Usage:
    record = evaluate_pr(Validator(ledger, forge_kind="github"), sub_or_number)   # unprivileged job
    verdict = apply_record(Validator(ledger, forge_kind="github"), record)         # privileged job

The record travels as a workflow artifact, so the apply step trusts nothing in
it that it can compute itself: it type-checks every field, re-checks the head
SHA, main and the cheap checks, recomputes staleness and attenuation from
ancestry and the config, recomputes the deterministic merge and compares the
candidate's sha256 with the evaluated one, and re-derives the decision from the
metrics under the policy on main. The benchmark metrics of an accepted PR are
measured again here, in the privileged job, and a record whose numbers differ is
refused (whoever controls the evaluate job or its artifact could
otherwise invent them; docs/github.md says why re-evaluation, not a signed record). If the PR's head or main
moved since evaluation, or the push loses a race, nothing is merged and the
PR stays open: the verdict is "requeued" and the scheduled sweeper
(`woolf-sweep.yml`) validates it again.

With `validators.quorum = k > 1` each validator's runner evaluates in its own job
and applies its own record: after the same re-checks, apply casts this
validator's signed vote from the record (never evaluating) and settles the PR
when that vote completes k agreeing votes (woolf/validator/quorum.py, `fixed=Fixed(...)`); a
vote that does not is the verdict "voted", and the PR waits for the others.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from woolf.core.policy import decide
from woolf.core.staleness import attenuation
from woolf.errors import RaceLostError, Rejected, UsageError
from woolf.ledger.benchmark import gate_benchmark
from woolf.protocol import layout
from woolf.storage.outer_state import state_bytes
from woolf.storage.writer import sha256_hasher
from woolf.timing import Timer
from woolf.validator import Verdict
from woolf.validator.admission import admit
from woolf.validator.candidate import Candidate, found
from woolf.validator.context import context_of
from woolf.validator.publish import merge
from woolf.validator.quorum import requeued, vote_one, voter
from woolf.validator.recheck import own_rejection, rescored_candidate
from woolf.validator.stages import gate_reference, merged_deltas
from woolf.validator.state import Fixed
from woolf.validator.step import evaluate, fresh, verdict_trailers

SCHEMA = 3  # 3: + device (where the metrics were evaluated), scores and flags (validator/screen.py, score.py)
RECORD_KEYS = {"schema", "id", "head", "main", "accepted", "reason", "staleness", "attenuation",
               "metrics", "base_version", "contributor", "timings", "candidate_sha256", "device",
               "scores", "flags"}
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _resolve(ctx, ref: str) -> str:
    """A submission id, or a PR number on forges that have them."""
    if ref.isdigit():
        for pr in ctx.forge.list():
            if pr.number == int(ref):
                return pr.id
        raise UsageError(f"no submission PR #{ref}")
    return ref


def candidate_sha256(step) -> str:
    """sha256 over the candidate's file as `merge()` writes it and, under a rule with state, the state's.

    The state counts: a FedBuff merge that only buffers leaves the weights as they were.
    """
    return candidate_digests(step)[1]


def candidate_digests(step) -> tuple[str, str]:
    """(sha256 of the weights file alone: what a vote names, candidate_sha256) from one pass over the weights."""
    h = sha256_hasher(step.candidate)  # the file's bytes from the tensors' memory, no serialised copy
    weights = h.hexdigest()  # hexdigest() does not finish h: the state's bytes can still follow
    if step.state is not None:
        h.update(state_bytes(step.state))
    return weights, h.hexdigest()


def evaluate_pr(v, ref: str) -> dict:
    """The verdict record of PR ``ref`` (an id, or a number) as ``v`` (a Validator or its context) judges it."""
    ctx = context_of(v)
    pr, main = fresh(ctx, _resolve(ctx, ref))
    if pr.state != "open":
        raise UsageError(f"{pr.id} is {pr.state}; nothing to evaluate")
    timer = Timer()
    verdict, step = evaluate(ctx, pr, main, timer)
    return {"schema": SCHEMA, "id": pr.id, "head": pr.head, "main": main.commit, "accepted": verdict.accepted,
            "reason": verdict.reason, "staleness": verdict.staleness, "attenuation": verdict.attenuation,
            "metrics": verdict.metrics, "base_version": verdict.base_version,
            "contributor": verdict.contributor, "timings": dict(timer),
            "candidate_sha256": candidate_sha256(step) if step is not None else None,
            "device": verdict.device,
            "scores": verdict.scores, "flags": [f for f in verdict.flags if f == "not-unique"]}


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _flat(d, limit: int = 32) -> bool:
    return isinstance(d, dict) and len(d) <= limit and all(
        isinstance(k, str) and len(k) <= 64 and _num(x) for k, x in d.items())


def _scores(d) -> bool:
    """score_delta's output (validator/score.py): numbers, plus "randoms" (one per random shard) and "seed"."""
    if not isinstance(d, dict) or len(d) > 12:
        return False
    rest = {k: x for k, x in d.items() if k not in ("randoms", "seed")}
    randoms, seed = d.get("randoms", []), d.get("seed", "")
    return (_flat(rest, 10) and isinstance(randoms, list) and len(randoms) <= 8 and all(_num(x) for x in randoms)
            and isinstance(seed, str) and len(seed) <= 64 and all(c in "0123456789abcdef" for c in seed))


def check_record(record) -> dict:
    """The record, if every field has the type and form `evaluate_pr` writes; else a UsageError naming it."""
    if not isinstance(record, dict) or set(record) != RECORD_KEYS or record.get("schema") != SCHEMA:
        raise UsageError("not a verdict record written by this version's `woolf validate --evaluate-only`")
    r = record
    m = r["metrics"]
    checks = {
        "id": isinstance(r["id"], str) and layout.SUBMISSION_ID.match(r["id"]),
        "head": isinstance(r["head"], str) and _SHA1.match(r["head"]),
        "main": isinstance(r["main"], str) and _SHA1.match(r["main"]),
        "accepted": isinstance(r["accepted"], bool),
        "reason": isinstance(r["reason"], str) and len(r["reason"]) <= 2000,
        "staleness": r["staleness"] is None or (_int(r["staleness"]) and r["staleness"] >= 0),
        "attenuation": r["attenuation"] is None or _num(r["attenuation"]),
        "metrics": isinstance(m, dict) and {"before", "after"} <= set(m) <= {"before", "after", "probe"}
                   and all(x is None or _flat(x) for x in m.values()),
        "base_version": r["base_version"] is None or (_int(r["base_version"]) and r["base_version"] >= 0),
        "contributor": r["contributor"] is None or (isinstance(r["contributor"], str)
                                                    and layout.CONTRIBUTOR.match(r["contributor"])),
        "timings": _flat(r["timings"]),
        "device": r["device"] is None or (isinstance(r["device"], str) and 0 < len(r["device"]) <= 200
                                          and r["device"].isprintable()),  # None: rejected before evaluation
        "scores": r["scores"] is None or _scores(r["scores"]),  # evaluation output, like the metrics
        "flags": isinstance(r["flags"], list) and set(r["flags"]) <= {"not-unique"},
        "candidate_sha256": (r["candidate_sha256"] is None and not r["accepted"])
                            or (isinstance(r["candidate_sha256"], str) and _SHA256.match(r["candidate_sha256"])),
    }
    bad = [k for k, ok in checks.items() if not ok]
    if bad:
        raise UsageError(f"verdict record: bad {', '.join(bad)}; the artifact was not written by "
                         "`woolf validate --evaluate-only`, or was altered")
    return record


METRIC_TOL = 1e-3  # relative: the evaluate job and this one may run on different devices


def _reevaluated(ctx, current, step, main, recorded: dict, timer: Timer) -> dict:
    """The benchmark metrics measured here, in the privileged job (whoever controls
    the evaluate job or its artifact could write any number). A record whose numbers disagree with
    them is refused; the verdict carries these."""
    wl, bench = ctx.ledger.workload(), gate_benchmark(ctx.ledger)
    with timer("evaluation"):
        before = ctx.state.eval_cache.get(main.commit) or wl.evaluate(current, bench, ctx.device)
        probe = wl.evaluate(step.probe, bench, ctx.device)
    mine = {"before": before, "after": probe if step.applied else before}
    if not step.applied:
        mine["probe"] = probe
    metric = ctx.ledger.config.policy.metric
    for part, values in mine.items():
        theirs, ours = (recorded.get(part) or {}).get(metric), values.get(metric)
        if not (isinstance(theirs, (int, float)) and isinstance(ours, (int, float))
                and abs(theirs - ours) <= METRIC_TOL * max(1.0, abs(ours))):
            raise UsageError(f"the record's {part} {metric} {theirs} is not what this job measured ({ours}): "
                             "the artifact's metrics were not computed by `woolf validate --evaluate-only` "
                             "on this PR, or were altered; nothing merged")
    decision = decide(ctx.ledger.config.policy, gate_reference(ctx, before), mine.get("probe") or mine["after"])
    if not decision.accepted:
        raise UsageError(f"this job's own metrics fail the ledger's policy: {decision.reason}; nothing merged")
    return mine


def _rederived(ctx, adm, pr, verdict: Verdict) -> float:
    """The attenuation, after everything computable about the accepted ``verdict`` is recomputed (nothing
    but the metrics is taken from the artifact): staleness and attenuation from ancestry and the config,
    the gate's decision from the metrics under the policy on main; UsageError when they disagree."""
    cfg = ctx.ledger.config
    att = attenuation(cfg.merge.staleness, adm.staleness)
    if adm.staleness != verdict.staleness or verdict.attenuation is None or abs(att - verdict.attenuation) > 1e-12:
        raise UsageError("the record's staleness or attenuation is not what ancestry and the config give")
    before, m = verdict.metrics["before"] or {}, verdict.metrics
    reference = gate_reference(ctx, before)  # the gate's reference, from main's history as the evaluation had it
    decision = decide(cfg.policy, reference, m.get("probe") or m["after"] or {})
    if not decision.accepted:
        raise UsageError("the record says accepted, but its own metrics fail the ledger's policy: "
                         f"{decision.reason}")
    reason = decision.reason if reference is before else f"{decision.reason} [best recent version]"
    verdict.reason, verdict.contributor = reason, pr.contributor
    verdict.base_version, verdict.attenuation = adm.base.version, att
    return att


def apply_record(v, record: dict) -> Verdict | None:
    """The verdict of a checked record applied by ``v`` (a Validator or its context); None when the PR
    is no longer open."""
    ctx = context_of(v)
    record = check_record(record)
    pr, main = fresh(ctx, record["id"])
    if pr.state != "open":
        return None
    if pr.head != record["head"]:
        return requeued(pr, "the PR's head moved since evaluation")
    if main.commit != record["main"]:
        return requeued(pr, "main moved since evaluation")
    cfg, timer = ctx.ledger.config, Timer()
    quorum = cfg.validators.quorum > 1  # one job's record is one validator's opinion: it becomes its vote
    if quorum and layout.CONTRIBUTOR.match(ctx.name) and voter(ctx, main) != ctx.name:  # named by WOOLF_VALIDATOR
        raise UsageError(f"this vote job is {ctx.name}'s, but its key votes as {voter(ctx, main)}",
                         hint=f"the secret WOOLF_VALIDATOR_KEY of the environment woolf-validator-{ctx.name} "
                              "holds that validator's own key (docs/github.md)")
    verdict = Verdict(pr.id, record["accepted"], "merged" if record["accepted"] else "rejected",
                      record["reason"], record["contributor"], record["base_version"],
                      staleness=record["staleness"], attenuation=record["attenuation"],
                      metrics=record["metrics"], timings=record["timings"], device=record["device"],
                      scores=record["scores"], flags=list(record["flags"]))
    with timer("checks"):
        try:
            adm = admit(ctx.ledger, pr, main, merged_deltas(ctx, main))
        except Rejected as exc:  # this job's own reason; none of the record's numbers go with it
            verdict = Verdict(pr.id, False, "rejected", exc.message, pr.contributor, record["base_version"])
    verdict = own_rejection(ctx, pr, main, record, verdict, timer)  # a record's rejection evaluated here
    if not verdict.accepted:
        if quorum:
            return vote_one(ctx, pr.id, fixed=Fixed(main.commit, verdict, None, None, pr.head))
        try:
            ctx.forge.reject(pr, verdict.reason, verdict_trailers(ctx, verdict, timer))
        except RaceLostError:
            return None
        return verdict
    cand = Candidate(pr, main, timer, adm=adm, attenuation=_rederived(ctx, adm, pr, verdict))
    try:
        # recomputed (main's metrics first); the scores measured here, not the record's (recheck.py)
        current, step = rescored_candidate(ctx, cand)
    except Rejected as exc:  # e.g. the delta became unreadable since evaluation
        verdict = replace(verdict, **found(cand), accepted=False, state="rejected", reason=exc.message)
        if quorum:  # storage that cannot serve the delta now is no vote (the voter's rule too)
            if exc.message.startswith("delta object unavailable"):
                return requeued(pr, "its delta is unavailable in storage now")
            return vote_one(ctx, pr.id, fixed=Fixed(main.commit, verdict, None, None, pr.head))
        ctx.forge.reject(pr, verdict.reason, verdict_trailers(ctx, verdict, timer))
        return verdict
    verdict = replace(verdict, **found(cand))
    weights, recorded = candidate_digests(step)  # a vote names the weights file's sha256
    if recorded != record["candidate_sha256"]:
        raise UsageError("the recomputed candidate differs from the evaluated one (sha256)")
    verdict.metrics = _reevaluated(ctx, current, step, main, verdict.metrics, timer)
    if quorum:
        return vote_one(ctx, pr.id, fixed=Fixed(main.commit, verdict, step, weights, pr.head))
    try:
        merge(ctx, pr, main, verdict, step, timer)
    except RaceLostError:
        return requeued(pr, "main moved or the PR got a verdict while merging")
    return verdict
