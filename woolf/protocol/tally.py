"""Quorum arithmetic: do k validators' votes agree, and how often did each agree with the outcome?

Usage:
    b = Ballot("v1", "<vote sha>", "accept", candidate="<sha256>", metric=2.31, main="<main sha>")
    out = tally([b1, b2, b3], k=2, epsilon=1e-3)     # Outcome("merged", votes=(b1, b2), dissent=("v3",))
    agreement_rates({"v1": (9, 10)})                  # {"v1": 0.9}

Pure: no git, no I/O. Votes agree when they have the same decision and, for an
accept, the same candidate sha256 (the merge is deterministic) and policy
metrics within ``epsilon`` of one anchor vote's (evaluation on different
hardware differs in the last digits). One ballot per validator counts: the
caller passes each validator's latest vote on the main it is settling against;
a second ballot under the same name is ignored here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECISIONS = ("accept", "reject")


@dataclass(frozen=True)
class Ballot:
    validator: str
    commit: str  # the vote commit
    decision: str  # accept | reject
    candidate: str | None = None  # sha256 of the candidate weights (accept)
    metric: float | None = None  # the policy metric of the candidate, as this validator evaluated it
    main: str | None = None  # the main commit the vote was cast against
    seconds: float | None = None  # evaluation time this validator recorded


@dataclass(frozen=True)
class Outcome:
    state: str  # pending | merged | rejected
    votes: tuple[Ballot, ...] = ()  # the agreeing ballots the outcome rests on (empty when pending)
    dissent: tuple[str, ...] = ()  # validators whose ballots disagree with the outcome

    @property
    def candidate(self) -> str | None:
        return self.votes[0].candidate if self.state == "merged" and self.votes else None


def agree(a: Ballot, b: Ballot, epsilon: float) -> bool:
    """Same decision; for accepts also the same candidate and metrics within epsilon."""
    if a.decision != b.decision:
        return False
    if a.decision == "reject":
        return True
    if a.candidate is None or a.candidate != b.candidate:
        return False
    if a.metric is None or b.metric is None:
        return a.metric is None and b.metric is None
    return math.isfinite(a.metric) and math.isfinite(b.metric) and abs(a.metric - b.metric) <= epsilon


def agrees_with(outcome: Ballot, b: Ballot, epsilon: float) -> bool:
    """Does ballot ``b`` agree with a settled outcome (its decision, candidate and recorded metric)?"""
    if b.decision != outcome.decision:
        return False
    if outcome.decision == "reject":
        return True
    if b.candidate != outcome.candidate:
        return False
    return outcome.metric is None or (b.metric is not None and math.isfinite(b.metric)
                                      and abs(b.metric - outcome.metric) <= epsilon)


def tally(ballots: list[Ballot], k: int, epsilon: float) -> Outcome:
    """The outcome k agreeing ballots give, or pending. Ties between two groups that both reach k
    (possible only when k <= n/2) go to the larger group, then to reject (the conservative one)."""
    if k < 1:
        raise ValueError("a quorum is at least 1")
    seen: set[str] = set()
    unique = []
    for b in sorted(ballots, key=lambda b: (b.validator, b.commit)):
        if b.validator not in seen and b.decision in DECISIONS:
            seen.add(b.validator)
            unique.append(b)
    best: list[Ballot] = []
    for anchor in unique:
        group = [b for b in unique if agree(anchor, b, epsilon)]
        key = (len(group), anchor.decision == "reject")
        if not best or key > (len(best), best[0].decision == "reject"):
            best = group
    if len(best) < k:
        return Outcome("pending")
    state = "merged" if best[0].decision == "accept" else "rejected"
    members = {b.validator for b in best}
    return Outcome(state, tuple(best), tuple(b.validator for b in unique if b.validator not in members))


def agreement_rates(counts: dict[str, tuple[int, int]]) -> dict[str, float | None]:
    """{validator: agreeing / settled} from {validator: (agreeing, settled)}; None without settled votes."""
    return {v: (a / n if n else None) for v, (a, n) in counts.items()}


def median(values: list[float]) -> float | None:
    xs = sorted(x for x in values if isinstance(x, (int, float)) and math.isfinite(x))
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
