"""OpenSkill Plackett-Luce ratings of contributors, as a pure function of the verdict history.

Usage:
    table, timeline = rate([(contributor, state, scores), ...], window=8)
    table["alice"].mu, table["alice"].sigma, table["alice"].ordinal
    timeline[i] == {"window": i, "ratings": {contributor: ordinal}}

The history is cut into consecutive windows of ``window`` verdicts (oldest first). In each
window every contributor who has a verdict there is one team; its score is the mean of its
verdicts' rank scores (woolf/core/scores.py: the improvement on its assigned shard beyond a
random one; rejections before evaluation far below); the window is one Plackett-Luce match (Gauntlet's
beta = 7, tau = 0.1). A window with a single contributor teaches nothing and is skipped.
The same history always gives the same ratings.
"""

from __future__ import annotations

from dataclasses import dataclass

from woolf.core.scores import rank_score

BETA, TAU = 7.0, 0.1


@dataclass
class Rating:
    mu: float
    sigma: float
    windows: int = 0  # matches this contributor took part in

    @property
    def ordinal(self) -> float:
        return self.mu - 3 * self.sigma

    def to_json(self) -> dict:
        return {"mu": self.mu, "sigma": self.sigma, "ordinal": self.ordinal, "windows": self.windows}


def _model():
    from openskill.models import PlackettLuce  # deferred: openskill

    return PlackettLuce(beta=BETA, tau=TAU)


def rate(history: list[tuple[str, str, dict | None]], window: int = 8) -> tuple[dict[str, Rating], list[dict]]:
    """({contributor: Rating}, [{"window": i, "end": verdicts so far, "ratings": {who: ordinal}}])."""
    model = _model()
    current: dict[str, object] = {}
    table: dict[str, Rating] = {}
    timeline: list[dict] = []
    window = max(1, int(window))
    for i in range(0, len(history), window):
        chunk = history[i:i + window]
        by_who: dict[str, list[float]] = {}
        for who, state, scores in chunk:
            if who:
                by_who.setdefault(who, []).append(rank_score(state, scores))
        for who in by_who:
            if who not in current:
                current[who] = model.rating(name=who)
        if len(by_who) < 2:
            continue
        names = sorted(by_who)
        means = [sum(by_who[w]) / len(by_who[w]) for w in names]
        teams = model.rate([[current[w]] for w in names], scores=means)
        for w, [r] in zip(names, teams, strict=True):
            current[w] = r
            table[w] = Rating(r.mu, r.sigma, (table[w].windows if w in table else 0) + 1)
        timeline.append({"window": len(timeline), "end": i + len(chunk),
                         "ratings": {w: table[w].ordinal for w in names}})
    for w, r in current.items():
        table.setdefault(w, Rating(r.mu, r.sigma, 0))
    return table, timeline
