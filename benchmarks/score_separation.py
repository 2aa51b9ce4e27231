"""How well contribution scores tell honest deltas from cheats, offline, and what the ratings make of it (§7).

Usage:
    python benchmarks/score_separation.py                       # 15-step deltas after 0, 40, 120 steps, 12 each
    python benchmarks/score_separation.py --pre 0 120 --n 4      # smaller
    python benchmarks/score_separation.py --rows a.json b.json  # only the rating simulation, from saved rows

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pre", type=int, nargs="+", default=[0, 40, 120], help="pre-training steps per stage")
    ap.add_argument("--n", type=int, default=12, help="deltas of each kind per stage")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--sample-bytes", type=int, default=8192)
    ap.add_argument("--rows", nargs="*", help="saved rows (one JSON per stage) instead of training")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--out", default="score_separation.json")
    args = ap.parse_args()
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
