"""Adversaries in the demo (§7): honest merges with and without cheaters, what each cheat got, ranks,
and the scoring overhead per PR against the benchmark evaluation, measured in the same runs.

Usage:
    python benchmarks/adversaries.py                      # the demo's defaults, 3 runs of each
    python benchmarks/adversaries.py --quick --runs 1     # 2 participants x 4 rounds x 15 steps, 1 validator
    python benchmarks/adversaries.py --participants 2 --rounds 1 --steps 5 --validators 1 --runs 1  # smoke

Per run pair: the share of honest PRs merged without adversaries and with them (target:
with >= 0.9 x without), every adversary's merged / rejected / marked counts and rating,
whether every honest participant is rated above every adversary, the validator seconds a
refused cheat's PR cost (median over its rejections: cheap screens refuse before scoring or
before the benchmark), the final ratings, and the ratio of the time spent scoring (its own
and two random shards, before and after) to the benchmark evaluation per PR.

Every verdict of both runs is recorded ("verdicts": who, state, scores, benchmark gain, reason),
so ratings and credit, pure functions of that history, can be recomputed offline
(benchmarks/score_separation.py --demo).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.demo.run import DemoOptions

KINDS = ["free-rider", "copycat", "overfitter", "noise", "flooder"]


def one_run(args, adversaries: list[str]) -> dict:
    from rich.console import Console

    from woolf.demo.run import run_demo
    from woolf.forges.local import LocalForge
    from woolf.ledger.ledger import Ledger
    from woolf.ledger.verdicts import verdict_history

    with tempfile.TemporaryDirectory(prefix="woolf-adv-") as tmp:
        res = run_demo(Path(tmp) / "hub", DemoOptions(participants=args.participants, rounds=args.rounds,
                       validators=args.validators, steps=args.steps, console=Console(quiet=True),
                       report=False, adversaries=adversaries))
        obs = Ledger.open(Path(tmp) / "hub" / "clones" / "observer")
        obs.main_ref = "refs/remotes/origin/main"  # the observer clone never pulls: its main is genesis
        obs.fetch()
        prs = LocalForge.for_ledger(obs).list(local_only=True)
        verdicts = [_verdict_row(r, obs.config.policy) for r in verdict_history(obs)]
    honest = [p for p in prs if p.contributor not in KINDS]
    timed = [p.timings for p in prs if p.timings and "scoring" in p.timings and p.timings.get("evaluation")]
    by_kind = {}
    for k in adversaries:
        mine = [p for p in prs if p.contributor == k]
        costs = [sum(v for v in p.timings.values() if isinstance(v, (int, float)))
                 for p in mine if p.state == "rejected" and p.timings]
        by_kind[k] = {"prs": len(mine), "merged": sum(p.state == "merged" for p in mine),
                      "rejected": sum(p.state == "rejected" for p in mine),
                      "over_limit": sum("over the limit" in (p.reason or "") for p in mine),
                      "copies": sum("copy of" in (p.reason or "") or "negation of" in (p.reason or "") for p in mine),
                      "refusal_seconds_median": statistics.median(costs) if costs else None,
                      **{f"outcome_{x}": y for x, y in res.outcomes.get(k, {}).items()}}
    honest_costs = [sum(v for v in p.timings.values() if isinstance(v, (int, float)))
                    for p in honest if p.timings]
    return {"adversaries": adversaries, "honest_prs": len(honest),
            "honest_merged": sum(p.state == "merged" for p in honest),
            "honest_rejections": [p.reason[:80] for p in honest if p.state == "rejected" and p.reason],
            "by_kind": by_kind, "outcomes": res.outcomes, "honest_above_adversaries": res.honest_above_adversaries,
            "honest_seconds_median": statistics.median(honest_costs) if honest_costs else None,
            "ratings": {w: o.get("rating") for w, o in res.outcomes.items()},
            "credit": {w: o.get("credit") for w, o in res.outcomes.items()},
            "scoring_over_evaluation": (sum(t["scoring"] for t in timed) / sum(t["evaluation"] for t in timed))
            if timed else None, "scored_prs": len(timed),
            "final_loss": res.final_loss, "alone_loss": res.alone_loss, "network_seconds": res.network_seconds,
            "verdicts": verdicts}


def _verdict_row(rec, policy) -> dict:
    """One verdict as the ratings and the credit read it (oldest first): who, what, its scores, its gain."""
    s = rec.scores or {}
    return {"who": rec.contributor, "state": rec.state, "version": rec.version, "base": rec.base_version,
            "rated": rec.rated, "reason": (rec.reason or "")[:90],
            **{k: s.get(k) for k in ("assigned", "random", "randoms", "difference") if k in s},
            "gain": rec.improvement(policy.metric, policy.direction)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--participants", type=int, default=3)
    ap.add_argument("--validators", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="the demo's --quick sizes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default="adversaries.json")
    ap.add_argument("--only-adversarial", action="store_true", help="no clean run: ratings only, half the time")
    args = ap.parse_args()
    if args.quick:
        args.participants, args.validators, args.rounds, args.steps = 2, 1, 4, 15
    pairs = []
    for i in range(args.runs):
        clean = None if args.only_adversarial else one_run(args, [])
        dirty = one_run(args, KINDS)
        ratio = None
        if clean and clean["honest_prs"] and dirty["honest_prs"] and clean["honest_merged"]:
            ratio = (dirty["honest_merged"] / dirty["honest_prs"]) / (clean["honest_merged"] / clean["honest_prs"])
        pairs.append({"clean": clean, "adversarial": dirty, "honest_merge_ratio": ratio})
        kinds = "  ".join(f"{k} {v['merged']}/{v['prs']} merged" for k, v in dirty["by_kind"].items())
        ratings = "  ".join(f"{w} {r:.2f}" if r is not None else f"{w} -" for w, r in dirty["ratings"].items())
        clean_txt = f"{clean['honest_merged']}/{clean['honest_prs']}" if clean else "-"
        print(f"run {i + 1}: honest merged {clean_txt} clean, "
              f"{dirty['honest_merged']}/{dirty['honest_prs']} with adversaries (ratio {ratio})  {kinds}  "
              f"honest above all adversaries: {dirty['honest_above_adversaries']}  scoring/evaluation "
              f"{dirty['scoring_over_evaluation']}  ratings {ratings}", flush=True)
        write_json(args.out, {"machine": machine(), "settings": vars(args), "runs": pairs, "partial": True})
    ratios = [p["adversarial"]["scoring_over_evaluation"] for p in pairs if p["adversarial"]["scoring_over_evaluation"]]
    out = {"machine": machine(), "settings": vars(args), "runs": pairs,
           "median_scoring_over_evaluation": statistics.median(ratios) if ratios else None}
    print(write_json(args.out, out))


if __name__ == "__main__":
    main()
