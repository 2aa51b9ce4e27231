"""OpenSkill Plackett-Luce ratings of contributors, as a pure function of the verdict history.

Usage:
    table, timeline = rate([(contributor, state, scores, reason), ...])   # window: match_size(history)
    table, timeline = rate(history, window=8)
    table["alice"].mu, table["alice"].sigma, table["alice"].ordinal
    timeline[i] == {"window": i, "ratings": {contributor: ordinal}}

The history is cut into consecutive windows of ``window`` verdicts (oldest first); by default
twice the number of contributors, at least 8 and at most 64 (match_size): with 7 contributors
and windows of 8, most matches missed most of them, and the order they arrived in decided
the ratings (benchmarks/RESULTS.md §7). Each
verdict's outcome is woolf/core/scores.py's rank_score: its improvement on its assigned shard
beyond the mean of random ones, in units of its window's own measurement noise (the spread
between random shards), so the chance-dominated scores near genesis weigh no more than later
ones; rejections before evaluation and deltas that learned nothing from their own shard rank
far below. In each window every contributor who plays (below) is one team, scored by
a moving average over its windows so far of its mean outcome in each, where each window weighs
as much as all its earlier ones together (DECAY; Templar smooths its scores alike): one lucky
window cannot carry a rating, and a contributor's early, chance-dominated verdicts fade as its
record grows. The window is one Plackett-Luce match (Gauntlet's beta = 7, tau = 0.1) among the
contributors with a verdict in it or in the window before (ACTIVE), an absent one with its
record as it stands: in the demo the last window often holds only the honest participants,
whose match alone moved the loser below a free-rider that sat it out. A match with a single
contributor teaches nothing and is skipped. The same history always gives the
same ratings. A 3-tuple (contributor, state, scores) is read as having no reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from woolf.core.scores import learned_nothing, rank_score, window_noise

BETA, TAU = 7.0, 0.1
DECAY = 0.5  # weight of a contributor's earlier windows per newer one (offline: benchmarks/RESULTS.md §7)
ACTIVE = 2  # windows a contributor plays after one with its verdict in it (its own, and the next)


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


def match_size(history: list[tuple], least: int = 8, most: int = 64) -> int:
    """Verdicts per match when none is given: about two verdicts of every contributor in each match."""
    return max(least, min(most, 2 * len({v[0] for v in history if v[0]})))


def rate(history: list[tuple], window: int | None = None) -> tuple[dict[str, Rating], list[dict]]:
    """({contributor: Rating}, [{"window": i, "end": verdicts so far, "ratings": {who: ordinal}}])."""
    model = _model()
    if window is None:
        window = match_size(history)
    current: dict[str, object] = {}
    table: dict[str, Rating] = {}
    record: dict[str, tuple[float, float]] = {}  # each contributor's (weighted sum, weight) of window means
    seen: dict[str, int] = {}  # each contributor's last window with a verdict of its own
    timeline: list[dict] = []
    window = max(1, int(window))
    for n, i in enumerate(range(0, len(history), window)):
        chunk = [(*v, None)[:4] for v in history[i:i + window]]
        noise = window_noise([scores for _, state, scores, reason in chunk if not learned_nothing(state, reason)])
        outcomes: dict[str, list[float]] = {}
        for who, state, scores, reason in chunk:
            if who:
                outcomes.setdefault(who, []).append(rank_score(state, scores, reason, noise))
        for who, got in outcomes.items():
            total, weight = record.get(who, (0.0, 0.0))
            record[who] = (total * DECAY + sum(got) / len(got), weight * DECAY + 1.0)
            seen[who] = n
        by_who = {who: total / weight for who, (total, weight) in record.items() if n - seen[who] < ACTIVE}
        for who in by_who:
            if who not in current:
                current[who] = model.rating(name=who)
        if len(by_who) < 2:
            continue
        names = sorted(by_who)
        teams = model.rate([[current[w]] for w in names], scores=[by_who[w] for w in names])
        for w, [r] in zip(names, teams, strict=True):
            current[w] = r
            table[w] = Rating(r.mu, r.sigma, (table[w].windows if w in table else 0) + 1)
        timeline.append({"window": len(timeline), "end": i + len(chunk),
                         "ratings": {w: table[w].ordinal for w in names}})
    for w, r in current.items():
        table.setdefault(w, Rating(r.mu, r.sigma, 0))
    return table, timeline
