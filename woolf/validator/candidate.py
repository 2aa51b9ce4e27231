"""One PR's evaluation as one record: what each stage found, and the Verdict made from it in one place.

Usage:
    cand = Candidate(pr, main, timer)          # the stages (validator/stages.py) fill it in order
    verdict = verdict_of(cand)                 # the one place an evaluation's Verdict is made
    fields = found(cand)                       # what the screen, scoring and re-training found (ci.py)

Each stage fills its part and no other: admission ``adm`` (the screen ``adm.screened`` and ``flags``),
staleness ``base_version``, ``staleness``, ``attenuation``; load ``current``, ``model_norm``, ``parent``,
``delta``; the norm guard ``norms``; scoring ``scores``; re-training ``retrain``; the merge ``step``; the
gate ``metrics``, ``device`` and the acceptance's ``reason``. A refusal's reason is ``reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from woolf.timing import Timer
from woolf.validator.verdict import Verdict


@dataclass
class Candidate:
    pr: Any  # woolf.forges.base.PullRequest
    main: Any  # woolf.protocol.versions.Version: main's head it is judged against
    timer: Timer  # the verdict's Woolf-Timings
    write_ahead: bool = False  # the candidate is written and hashed while it is evaluated (validator/ahead.py)
    # main's metrics are measured before the merge, which may then write the candidate into main's memory
    # (one model in memory, not two); False: the merge leaves main's weights as they are
    in_place: bool = True
    adm: Any = None  # validator/admission.py Admitted; adm.screened: validator/screen.py Screened
    base_version: int | None = None  # from ancestry (None: the forge's claim, pr.base_version)
    staleness: int | None = None
    attenuation: float | None = None
    current: dict | None = None  # main's weights (resident or read); after an in-place merge, the candidate's
    model_norm: float | None = None  # their norm, once measured
    parent: Any = None  # the parent version's merge state (ledger/transition.py parent_state)
    delta: Any = None  # the PR's delta (validator/delta_load.py); its storage hashes may still be running
    norms: tuple[float, float] | None = None  # (the delta's norm, the model's): the norm guard's, for the screen
    unsettled: Any = None  # the delta, once its hashes run beside the evaluation: settled before the verdict
    spent: bool = False  # scoring wrote into main's memory (or dropped it): the merge reads main again
    flags: list = field(default_factory=list)  # the screen's, then scoring's and re-training's marks
    scores: dict | None = None
    retrain: dict | None = None
    step: Any = None  # woolf.core.merge_rules.Step, once merged
    metrics: dict | None = None  # {"before", "after"[, "probe"]}: the gate's
    device: str | None = None  # where the metrics were evaluated
    reason: str = ""  # a refusal's reason, or the gate's acceptance
    accepted: bool = False  # every stage passed
    problem: str | None = None  # the delta's storage hashes were wrong (found when settled before the verdict)


def found(cand: Candidate) -> dict:
    """What the screen, scoring and re-training found, as the Verdict's fields (absent: None, no flags)."""
    sc = cand.adm.screened if cand.adm is not None else None
    return {"content": sc.content if sc else None, "delta_norm": sc.norm if sc else None,
            "clip": sc.clip if sc else None, "flags": cand.flags, "scores": cand.scores, "retrain": cand.retrain}


def verdict_of(cand: Candidate) -> Verdict:
    """The verdict on ``cand``'s PR. Wrong storage hashes of its delta are the whole reason: nothing that
    was made of those bytes is recorded."""
    pr = cand.pr
    base = cand.base_version if cand.base_version is not None else pr.base_version
    if cand.problem is not None:
        return Verdict(pr.id, False, "rejected", cand.problem, pr.contributor, base,
                       staleness=cand.staleness, attenuation=cand.attenuation)
    return Verdict(pr.id, cand.accepted, "merged" if cand.accepted else "rejected", cand.reason, pr.contributor,
                   base, staleness=cand.staleness, attenuation=cand.attenuation, device=cand.device,
                   metrics=cand.metrics or {"before": None, "after": None}, **found(cand))
