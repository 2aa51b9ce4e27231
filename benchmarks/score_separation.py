"""How well contribution scores tell honest deltas from cheats, offline, and what the ratings make of it (§7).

Usage:
    python benchmarks/score_separation.py                       # 15-step deltas after 0, 40, 120 steps, 12 each
    python benchmarks/score_separation.py --pre 0 120 --n 4      # smaller
    python benchmarks/score_separation.py --rows a.json b.json  # only the rating simulation, from saved rows
    python benchmarks/score_separation.py --demo results/adversaries_quick_cont.json  # part 3 only

Part 1 trains, from the charlm genesis (optionally pre-trained ``--pre`` steps: the ledger
later in training, or continued training), per trial one delta of each kind: honest (its
assigned shard), free-rider (another shard), overfitter (the public benchmark), flooder
(its shard, 3 steps); it scores each as the validator does (woolf/validator/score.py:
its own shard and RANDOM_SHARDS random shards, `sample_bytes` each) and prints, per
kind, assigned minus the mean random improvement and the AUC of honest against it.

Part 2 bootstraps rating histories from those rows: W windows, each with every honest
participant, the free-rider, the overfitter, two flooder verdicts and a refused copy
and random delta, the stage of training moving from the first rows file to the last,
rated by the real woolf/core/ratings.py; it prints how often every honest participant is
rated above every cheat (and above the free-rider and overfitter).

Part 3 (``--demo``, JSON written by benchmarks/adversaries.py): demo-like histories. Each
recorded adversarial run keeps its sequence of verdicts (who, when, merged or refused and
why: the arrivals, the gaps, the windows an honest participant sits out), and each measured
verdict's scores are redrawn from the measured scores of the same kind over all the runs
given (honest pooled); rated by the real rate() with its default window, it prints the same
two shares (the recorded histories themselves are the first trial of each).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

KINDS = ("honest", "free-rider", "overfitter", "flooder")


def _auc(pos, neg) -> float:
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))


def train_rows(pre: int, n: int, steps: int, size: int) -> list[dict]:
    from woolf.validator.score import RANDOM_SHARDS, random_name, sample  # deferred: loads torch
    from woolf.workloads import corpus
    from woolf.workloads.base import TrainData
    from woolf.workloads.charlm import CharLM

    wl = CharLM()
    w0 = wl.genesis(seed=0)
    if pre:
        w0, _ = wl.train(w0, wl.default_data("pretrain", 0), pre, seed=99)
    bench = corpus.benchmark_text(32768)
    rows = []
    for i in range(n):
        seed = f"{pre:04d}{i:04d}" * 4
        own = sample(wl.default_data(f"p{i}", i).texts, size, seed)
        rnd = [sample(wl.default_data(random_name(seed, j), i).texts, size, f"{seed}:{j}") for j in range(RANDOM_SHARDS)]
        data = {"honest": (wl.default_data(f"p{i}", i), steps), "free-rider": (wl.default_data(f"~other:{i}", i), steps),
                "overfitter": (TrainData([bench], "benchmark"), steps), "flooder": (wl.default_data(f"p{i}", i), 3)}
        for kind, (d, st) in data.items():
            new, _ = wl.train(w0, d, st, seed=i)
            gain = [wl.evaluate(w0, x)["loss"] - wl.evaluate(new, x)["loss"] for x in [own, *rnd]]
            rows.append({"kind": kind, "pre": pre, "assigned": gain[0], "randoms": gain[1:],
                         "random": sum(gain[1:]) / len(gain[1:])})
    return rows


def separation(rows: list[dict]) -> dict:
    d = {k: [r["assigned"] - r["random"] for r in rows if r["kind"] == k] for k in KINDS}
    return {k: {"mean": statistics.mean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0,
                "auc_honest_above": _auc(d["honest"], v) if k != "honest" else None} for k, v in d.items()}


def simulate(stages: list[list[dict]], honest: int, windows: int, trials: int, seed: int = 0) -> dict:
    from woolf.core.ratings import rate

    rng = random.Random(seed)
    pools = [{k: [r for r in rows if r["kind"] == k] for k in KINDS} for rows in stages]
    all_ok = pair_ok = 0
    for _ in range(trials):
        history = []
        for w in range(windows):
            pool = pools[min(w * len(pools) // windows, len(pools) - 1)]
            window = [(f"p{i}", rng.choice(pool["honest"])) for i in range(honest)]
            window += [(k, rng.choice(pool[k])) for k in ("free-rider", "overfitter", "flooder", "flooder")]
            history += [(who, "rejected", {k: r[k] for k in ("assigned", "random", "randoms")}
                         | {"difference": r["assigned"] - r["random"]}, "") for who, r in window]
            history += [("copycat", "rejected", None, "a copy of PR x"), ("noise", "rejected", None, "a no-op")]
        table, _ = rate(history, window=honest + 6)
        low = min(table[f"p{i}"].ordinal for i in range(honest))
        all_ok += low > max(r.ordinal for w, r in table.items() if not w.startswith("p"))
        pair_ok += low > max(table["free-rider"].ordinal, table["overfitter"].ordinal)
    return {"honest": honest, "windows": windows, "trials": trials, "every_honest_above_every_cheat": all_ok / trials,
            "every_honest_above_free_rider_and_overfitter": pair_ok / trials}


def demo_histories(paths: list[str], trials: int, seed: int = 0) -> dict:
    from woolf.core.ratings import rate

    def kind(who):
        return "honest" if who.startswith("p") and who[1:].isdigit() else who

    runs = [[(v["who"], v["state"], {k: v[k] for k in ("assigned", "random", "randoms", "difference") if k in v}
              or None, v["reason"]) for v in pair["adversarial"]["verdicts"] if v["rated"] and v["who"]]
            for p in paths for pair in json.loads(Path(p).read_text())["runs"] if pair["adversarial"].get("verdicts")]
    pool: dict[str, list] = {}
    for h in runs:
        for who, _, scores, _ in h:
            if scores and "difference" in scores:
                pool.setdefault(kind(who), []).append(scores)
    rng, all_ok, pair_ok, n = random.Random(seed), 0, 0, 0
    for h in runs:
        for t in range(trials):
            hh = h if t == 0 else [(w, st, rng.choice(pool[kind(w)]) if s and "difference" in s else s, why)
                                   for w, st, s, why in h]
            table, _ = rate(hh)
            honest = [r.ordinal for w, r in table.items() if kind(w) == "honest"]
            cheats = [r.ordinal for w, r in table.items() if kind(w) != "honest"]
            pair = [table[w].ordinal for w in ("free-rider", "overfitter") if w in table]
            n += 1
            all_ok += bool(honest) and min(honest) > max(cheats, default=float("-inf"))
            pair_ok += bool(honest) and min(honest) > max(pair, default=float("-inf"))
    return {"runs": len(runs), "trials": n, "measured": {k: len(v) for k, v in pool.items()},
            "every_honest_above_every_cheat": all_ok / max(1, n),
            "every_honest_above_free_rider_and_overfitter": pair_ok / max(1, n)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pre", type=int, nargs="+", default=[0, 40, 120], help="pre-training steps per stage")
    ap.add_argument("--n", type=int, default=12, help="deltas of each kind per stage")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--sample-bytes", type=int, default=8192)
    ap.add_argument("--rows", nargs="*", help="saved rows (one JSON per stage) instead of training")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--demo", nargs="*", help="adversaries.py JSON: part 3 only (demo-like histories)")
    ap.add_argument("--out", default="score_separation.json")
    args = ap.parse_args()
    if args.demo:
        got = demo_histories(args.demo, args.trials)
        print(f"{got['runs']} recorded runs x {args.trials} trials: every honest above every cheat "
              f"{got['every_honest_above_every_cheat']:.2f}, above free-rider and overfitter "
              f"{got['every_honest_above_free_rider_and_overfitter']:.2f}", flush=True)
        print(write_json(args.out, {"machine": machine(), "settings": vars(args), "demo": got}))
        return
    if args.rows:
        stages = [json.loads(Path(p).read_text()) for p in args.rows]
    else:
        stages = [train_rows(p, args.n, args.steps, args.sample_bytes) for p in args.pre]
    out = {"machine": machine(), "settings": vars(args), "stages": [], "simulations": []}
    for rows in stages:
        sep = separation(rows)
        out["stages"].append({"pre": rows[0].get("pre"), "separation": sep, "rows": rows})
        print(f"pre {rows[0].get('pre')}: " + "  ".join(
            f"{k} {v['mean']:+.3f}+-{v['sd']:.3f}" + (f" (AUC {v['auc_honest_above']:.2f})" if v["auc_honest_above"]
                                                     is not None else "") for k, v in sep.items()), flush=True)
    for label, chosen in [(f"pre {s[0].get('pre')}", [s]) for s in stages] + [("all stages in order", stages)]:
        for honest, windows in ((2, 5), (3, 10)):
            sim = simulate(chosen, honest, windows, args.trials)
            out["simulations"].append({"stages": label, **sim})
            print(f"{label}: {honest} honest, {windows} windows: every honest above every cheat "
                  f"{sim['every_honest_above_every_cheat']:.2f}, above free-rider and overfitter "
                  f"{sim['every_honest_above_free_rider_and_overfitter']:.2f}", flush=True)
    print(write_json(args.out, out))


if __name__ == "__main__":
    main()
