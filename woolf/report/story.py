"""What happened in a ledger, in words: the best and the final version, merges that raised the loss,
rejections grouped by kind, each participant's activity.

Usage:
    facts = version_facts(ledger.log())        # best/final version, regressing merges
    rejection_kind("staleness 5 is over the ledger's max_staleness 4; ...")   # "too stale"
    activity(prs)                               # {"p1": {"merged": 3, "rejected": 1, "open": 0}, ...}
    joining_sentence(demo_json)                 # "joining paid: ..., ±0.0031 benchmark noise (closing 60% of ...)"
    regime_sentence(demo_json)                  # "Each participant trains on its own data, continuing ..."
"""

from __future__ import annotations

from collections import Counter

# (words in the reason, kind): the first that matches names the kind; reasons are attacker-written text
_KINDS = (
    ("is below the required", "the benchmark got worse than the gate tolerates (policy.min_improvement)"),
    ("max_staleness", "too stale"),
    ("retrain: ", "refused by the proof of training (retrain: ...)"),  # before "replay": "step 8 does not replay"
    ("replay", "a replay of a merged delta"),
    ("copy", "a copy of another pull request"),
    ("norm", "delta norm out of bounds"),
    ("not finite", "not finite"),
    ("sha256", "delta bytes do not match"),
    ("delta object", "delta missing from storage"),
    ("submission.json", "malformed submission"),
    ("outside its submission area", "touches files outside its submission"),
)


RATING_VS_CREDIT = ("rating and credit measure different things: the rating (`woolf leaderboard`) ranks how much "
                    "each contributor's PRs learned their own data against the others' in the same window of verdicts, "
                    "merged or not; credit (`woolf credit`) is each contributor's share of the benchmark improvement "
                    "its merged versions made, after attenuation. One may be high while the other is low.")
MARKED_AND_RANDOM = ("marked = PRs whose verdict carries a flag (not-unique: random text improved as much as the "
                     "contributor's own assigned shard, so it may not have trained on it); assigned-random = loss "
                     "removed on the assigned shard minus on random text, per PR, averaged (higher: it learned its "
                     "own data); the rating is OpenSkill's ordinal (mu - 3 sigma), ranking contributors within each "
                     "window of verdicts by assigned-random, not by merge count: few verdicts leave sigma high and "
                     "the ordinal low")


def rejection_kind(reason: str | None) -> str:
    text = " ".join((reason or "").split())
    for needle, kind in _KINDS:
        if needle in text:
            return kind
    head = text.split(":")[0].strip()
    return (head[:57] + "...") if len(head) > 60 else (head or "no reason given")


def rejection_kinds(prs) -> dict[str, int]:
    return dict(Counter(rejection_kind(p.reason) for p in prs if p.state == "rejected").most_common())


def _loss(v) -> float | None:
    value = (v.metrics or {}).get("loss")
    return float(value) if isinstance(value, (int, float)) else None


def version_facts(versions) -> dict:
    """Best and final version by benchmark loss, and the merges whose loss is above their parent's."""
    ordered = sorted(versions, key=lambda v: v.version)
    scored = [(v.version, loss) for v in ordered if (loss := _loss(v)) is not None]
    facts: dict = {"final_version": ordered[-1].version if ordered else None, "final_loss": None,
                   "best_version": None, "best_loss": None, "regressing_merges": 0, "merges": 0}
    if not scored:
        return facts
    facts["final_loss"] = scored[-1][1] if scored[-1][0] == facts["final_version"] else None
    facts["best_version"], facts["best_loss"] = min(scored, key=lambda s: (s[1], s[0]))
    previous = None
    for _version, loss in scored:
        if previous is not None:
            facts["merges"] += 1
            facts["regressing_merges"] += loss > previous
        previous = loss
    return facts


def facts_sentence(facts: dict) -> str:
    if facts.get("best_version") is None:
        return "no version has a recorded benchmark loss"
    words = (f"best version {facts['best_version']} (loss {facts['best_loss']:.4f}); "
             f"final version {facts['final_version']}")
    if facts.get("final_loss") is not None:
        gap = facts["final_loss"] - facts["best_loss"]
        words += f" (loss {facts['final_loss']:.4f}" + (f", {gap:.4f} above the best)" if gap > 0 else ")")
    n, bad = facts.get("merges", 0), facts.get("regressing_merges", 0)
    if n:
        words += (f"; {bad} of {n} merges raised the loss (each by less than the regression the gate tolerates, "
                  "policy.min_improvement)" if bad else f"; none of {n} merges raised the loss")
    return words


def activity(prs) -> dict[str, dict[str, int]]:
    """Pull requests per contributor and state, contributors in name order."""
    out: dict[str, dict[str, int]] = {}
    for p in prs:
        row = out.setdefault(p.contributor or "?", {"merged": 0, "rejected": 0, "open": 0, "withdrawn": 0})
        if p.state in row:
            row[p.state] += 1
    return dict(sorted(out.items()))


def joining_sentence(demo: dict) -> str | None:
    """Did joining pay? The ledger against the best participant alone at the same compute, and the share
    of the gap from alone to synchronous data parallel that it closed (None: no reference runs)."""
    final, alone, parallel = demo.get("final_loss"), demo.get("alone_loss"), demo.get("parallel_loss")
    if final is None or alone is None:
        return None
    gain = alone - final
    noise, windows = demo.get("margin_noise"), demo.get("margin_windows")
    if isinstance(noise, (int, float)) and abs(gain) <= noise:  # the benchmark cannot tell them apart
        side = "below" if gain > 0 else "above"
        return (f"too close to call: the ledger ends {abs(gain):.4f} {side} the best participant alone, within "
                f"the benchmark's noise of ±{noise:.4f} (two standard errors over {windows} windows)")
    said = f", ±{noise:.4f} benchmark noise" if isinstance(noise, (int, float)) else ""
    if gain <= 0:
        return f"joining did not pay: the ledger ends {-gain:.4f} above the best participant alone{said}"
    words = f"joining paid: the ledger ends {gain:.4f} below the best participant alone{said}"
    if parallel is not None and alone > parallel:
        words += f" (closing {gain / (alone - parallel):.0%} of the gap to data parallel)"
    return words


def regime_sentence(demo: dict) -> str | None:
    """The demo's regime in words (woolf/demo/regimes.py), e.g. "each participant trains on its own data,
    continuing a pretrained model"; None for a ledger that no demo ran."""
    words, name = demo.get("regime_words"), demo.get("regime")
    if not isinstance(words, str) or not words:
        return None
    said = f"{words[0].upper()}{words[1:]}" + (f" (`woolf demo --regime {name}`)." if isinstance(name, str) else ".")
    if isinstance(demo.get("lora"), str):  # `woolf demo --lora R`
        said += f" Each contribution: {demo.get('contributions')} (`woolf demo --lora {demo['lora']}`)."
    return said
