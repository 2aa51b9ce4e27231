"""The gate's and scoring's decisions made both ways on the same per-window losses of a stream of real PRs
(issue 50, item 4: "the gate's decisions unchanged on a set of PRs").

Usage:
    python benchmarks/decision_replay.py                          # charlm, the demo's regime: 25 rounds, 206 PRs
    python benchmarks/decision_replay.py --workload transformers --rounds 6   # a small Llama pretrained here
    python benchmarks/decision_replay.py --rounds 2                # the smoke size

Per PR, main's and the candidate's loss on every window of the benchmark are measured once (the
workload's window_losses, as the validator measures them), and base's and base + delta's on every
window of the three scoring samples (the assigned one and two random ones, drawn as score.py draws
them). The "full" decisions are the policy's on the means over every window (what `validators.eval
= "full"` records: evaluate() is that mean); the "sequential" ones are what the validator's own loops
decide (core/sequential.py reject_early for the gate: what `validators.early_reject = true` does; the
default measures every window and decides as "full"; validator/seqscore.py settle_scores for
scoring), fed those same losses in the validator's drawn orders. Compared PR by PR: the gate's
decision, and scoring's (the `not-unique` mark under the default config; the refusals under `woolf
demo --adversaries`' settings, `scoring.min_assigned` 0.01 and `uniqueness = "reject"`), with the
windows each evaluated.

The stream, in process (no git: what the validator's decisions see is the losses): the charlm
continued-domain regime of `woolf demo` (its pretrained genesis, each participant its own part of
the corpus, alpha_base 1/5, polynomial staleness, `--quick`'s 15 steps); each round three of p1..p5
train 7 or 15 steps from main (every third from the version two merges back: stale, attenuated), four
PRs are their deltas times a factor drawn from [-4, 3] (improvements and regressions of every size
around the bar), one is Gaussian noise of 1-30x a merged delta's norm, and every fourth round an
overfitter trains on the public benchmark. Main moves by the ledger's merge of each PR the full gate
accepts. The gate's worst case is measured on each PR's own per-window differences too: shifted so that
their mean is the bar (the full evaluation just accepts), the fraction of ORDERS drawn window orders in
which the sequential loop rejects early (at_bar_rejected: what `1 - validators.confidence` bounds).
Each PR's gate is also decided both ways at the bars in BARS (main still moves by the ledger's bar),
where more PRs lie near the bar than at the demo's -0.02. Results go to
benchmarks/results/decision_replay_<workload>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

NAMES = ["p1", "p2", "p3", "p4", "p5"]
BARS = (0.0, 0.002, 0.005)  # other policy.min_improvement values each PR is also judged at (both ways)
ORDERS = 100  # window orders per PR for the worst-case error rate (at_bar)
ADVERSARY_SCORING = {"scoring.min_assigned": "0.01", "scoring.uniqueness": "reject"}  # demo --adversaries


def _config(overrides: dict):
    from woolf.protocol.config import LedgerConfig
    from woolf.protocol.config_text import apply_overrides

    return apply_overrides(LedgerConfig(), overrides)


def charlm_stream():
    from safetensors.torch import load_file

    from woolf.demo.regimes import prepare_regime
    from woolf.workloads.base import load_workload

    weights, added = prepare_regime("continued-domain", NAMES, {"workload.steps": "15"})  # demo --quick's steps
    cfg = _config({"workload.steps": "15", **added})
    wl = load_workload(cfg.workload)
    return cfg, wl, load_file(str(weights)), wl.benchmark_bytes()


def transformers_stream(root: Path, pretrain: int):
    import gate_agreement

    led = gate_agreement.transformers_ledger(root, pretrain)
    return led.config, led.workload(), led.load_weights(led.head()), led.benchmark()


class Losses:
    """Each version's losses on a text, every window, measured once."""

    def __init__(self, wl):
        self.wl, self.kept = wl, {}

    def of(self, key, weights, text: bytes) -> list[float]:
        k = (key, hashlib.sha256(text).hexdigest())
        if k not in self.kept:
            n, _ = self.wl.windows(text)
            self.kept[k] = self.wl.window_losses(weights, text, range(n))
        return self.kept[k]


def gate_both(cfg, wl, main_losses: list[float], cand_losses: list[float], seed: str, bars: bool = True):
    from woolf.core.policy import decide
    from woolf.core.sequential import reject_early, window_order

    n = len(main_losses)
    before, after = (wl.metrics_of(math.fsum(x) / n) for x in (main_losses, cand_losses))
    full = decide(cfg.policy, before, after)
    got, iv = reject_early(lambda idx: [cand_losses[i] for i in idx], main_losses, window_order(f"gate:{seed}", n),
                           cfg.policy.min_improvement, cfg.validators.confidence,
                           wl.LINEAR_METRICS[cfg.policy.metric], cfg.policy.direction)
    seq = full.accepted if iv is None else False
    if not bars:
        return [full.accepted, seq, len(got)]
    return {"full": full.accepted, "sequential": seq, "improvement": full.improvement, "windows": len(got),
            "of": n, "early": iv is not None, "at_bar_rejected": at_bar(cfg, wl, main_losses, cand_losses, seed),
            "bars": {str(bar): _at(cfg, wl, main_losses, cand_losses, seed, bar) for bar in BARS}}


def _at(cfg, wl, main_losses: list[float], cand_losses: list[float], seed: str, bar: float) -> list:
    """[full accepts, sequential accepts, windows the sequential gate measured] under policy.min_improvement
    = ``bar``: the same PR's decisions where the bar lies nearer its improvement (main still moves by the
    ledger's own bar)."""
    from dataclasses import replace

    return gate_both(replace(cfg, policy=replace(cfg.policy, min_improvement=bar)), wl, main_losses, cand_losses,
                     seed, bars=False)


def at_bar(cfg, wl, main_losses: list[float], cand_losses: list[float], seed: str, orders: int = ORDERS) -> float:
    """The gate's worst case on this PR's own per-window differences: shifted so that their mean over every
    window is the bar itself (plus 1e-9: the full evaluation accepts), how often the sequential loop rejects
    early over ``orders`` drawn window orders. What `1 - validators.confidence` bounds."""
    from woolf.core.scores import improvement
    from woolf.core.sequential import reject_early, window_order

    n, factor = len(main_losses), wl.LINEAR_METRICS[cfg.policy.metric]
    d = [factor * improvement(m, c, cfg.policy.direction) for m, c in zip(main_losses, cand_losses, strict=True)]
    if not all(math.isfinite(x) for x in d):
        return math.nan
    shift = cfg.policy.min_improvement + 1e-9 - math.fsum(d) / n
    at = [x + shift for x in d]  # improvement on window i, at the bar on average
    wrong = sum(reject_early(lambda idx: [-at[i] for i in idx], [0.0] * n, window_order(f"bar:{seed}:{k}", n),
                             cfg.policy.min_improvement, cfg.validators.confidence)[1] is not None
                for k in range(orders))
    return wrong / orders


def scores_both(cfg, wl, shards: list[tuple[list[float], list[float]]], seed: str) -> dict:
    """Scoring's decisions on every window (full) and as settle_scores makes them (sequential)."""
    from woolf.core.scores import improvement, unique
    from woolf.validator.seqscore import settle_scores

    factor = wl.LINEAR_METRICS[cfg.policy.metric]
    got = [factor * improvement(math.fsum(b) / len(b), math.fsum(a) / len(a), cfg.policy.direction)
           for b, a in shards]
    full = {"assigned": got[0], "random": sum(got[1:]) / len(got[1:])}
    seq = settle_scores(lambda j, idx: ([shards[j][0][i] for i in idx], [shards[j][1][i] for i in idx]),
                        [(len(b), wl.windows(b"")[1]) for b, _ in shards], seed, cfg, factor)
    floor = cfg.scoring.min_assigned

    def refused(s):
        if math.isfinite(floor) and s["assigned"] < floor:
            return "floor"
        if cfg.scoring.uniqueness == "reject" and not unique(s["assigned"], s["random"]):
            return "not-unique"
        return None

    def marked(s):
        return cfg.scoring.uniqueness == "mark" and "random" in s and not unique(s["assigned"], s["random"])

    windows = sum(len(b) for b, _ in shards)
    return {"full_refused": refused(full), "seq_refused": refused(seq), "full_mark": marked(full),
            "seq_mark": marked(seq), "windows": seq["tokens"] // wl.windows(b"")[1], "of": windows,
            "assigned": (full["assigned"], seq["assigned"]), "random": (full["random"], seq.get("random"))}


def _samples(wl, cfg, who: str, version: int, seed: str) -> list[bytes]:
    from woolf.validator.score import RANDOM_SHARDS, random_name, sample

    size = cfg.scoring.sample_bytes
    out = [sample(wl.default_data(who, version).texts, size, seed)]
    return out + [sample(wl.default_data(random_name(seed, j), version).texts, size, f"{seed}:{j}")
                  for j in range(RANDOM_SHARDS)]


def _trained_delta(wl, base: dict, data, steps: int, seed: int) -> dict:
    new, _ = wl.train({k: v.clone() for k, v in base.items()}, data, steps, device="cpu", seed=seed)
    return {k: new[k].float() - base[k].float() for k in base}


def _prs(wl, cfg, versions: list[dict], rnd: int, rng: random.Random, bench: bytes, merged_norm: float):
    """This round's PRs: (who, base version, delta). Three participants train (in turn, 7 or 15 steps; every
    third from the version two merges back); four PRs are their deltas times a factor drawn from [-4, 3]
    (improvements and regressions of every size around the bar, for the price of evaluations only); one is
    noise of 1-30x a merged delta's norm; every fourth round an overfitter trains on the public benchmark."""
    import torch

    from woolf.workloads.base import TrainData

    steps = cfg.workload.steps
    top = len(versions) - 1
    out = []
    for i in range(3):
        who = NAMES[(3 * rnd + i) % len(NAMES)]
        base_v = max(0, top - 2) if (rnd + i) % 3 == 0 and rnd else top
        out.append((who, base_v, _trained_delta(wl, versions[base_v], wl.default_data(who, base_v),
                                                rng.choice([max(1, steps // 2), steps]), rng.randrange(1000))))
    for _ in range(4):
        who, base_v, d = rng.choice(out[:3])
        k = rng.uniform(-4.0, 3.0)
        out.append((who, base_v, {n: k * x for n, x in d.items()}))
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    noise = {n: torch.randn(x.shape, generator=g) for n, x in versions[top].items()}
    total = math.sqrt(sum(float(x.pow(2).sum()) for x in noise.values()))
    scale = merged_norm * rng.choice([1.0, 3.0, 10.0, 30.0]) / total
    out.append(("noise", top, {n: x * scale for n, x in noise.items()}))
    if rnd % 4 == 3:
        out.append(("overfit", top, _trained_delta(wl, versions[top], TrainData([bench], "benchmark"), steps,
                                                   rng.randrange(1000))))
    return out


def study(root: Path, workload: str, rounds: int, pretrain: int) -> dict:
    from woolf.core.merge import apply_delta
    from woolf.core.scores import norm
    from woolf.core.staleness import attenuation

    t0 = time.perf_counter()
    cfg, wl, genesis, bench = charlm_stream() if workload == "charlm" else transformers_stream(root, pretrain)
    adv = _config(ADVERSARY_SCORING)
    losses = Losses(wl)
    versions = [{k: v.float() for k, v in genesis.items()}]
    rows, merged_norm = [], 1.0
    rng = random.Random(0)
    print(f"{workload}: ready in {time.perf_counter() - t0:.0f} s", flush=True)
    for rnd in range(rounds):
        for who, base_v, delta in _prs(wl, cfg, versions, rnd, rng, bench, merged_norm):
            top = len(versions) - 1
            main = versions[top]
            stale = top - base_v
            scale = cfg.merge.alpha_base * attenuation(cfg.merge.staleness, stale)
            cand = apply_delta(main, delta, scale)
            seed = hashlib.sha256(f"replay:{workload}:{top}".encode()).hexdigest()
            cand_losses = wl.window_losses(cand, bench, range(wl.windows(bench)[0]))
            gate = gate_both(cfg, wl, losses.of(top, main, bench), cand_losses, seed)
            after = apply_delta(versions[base_v], delta, 1.0)
            texts = _samples(wl, cfg, who, base_v, seed)
            shards = [(losses.of(base_v, versions[base_v], t), wl.window_losses(after, t, range(wl.windows(t)[0])))
                      for t in texts]
            row = {"round": rnd, "who": who, "staleness": stale, "gate": gate,
                   "scoring_default": scores_both(cfg, wl, shards, seed),
                   "scoring_adversaries": scores_both(_with_scoring(cfg, adv), wl, shards, seed)}
            rows.append(row)
            mark = "" if gate["full"] == gate["sequential"] else "  DIFFERENT"
            print(f"r{rnd} {who:>7} s{stale}: {gate['improvement']:+.4f} full {'A' if gate['full'] else 'R'} "
                  f"seq {'A' if gate['sequential'] else 'R'} ({gate['windows']}/{gate['of']} windows){mark}; "
                  f"scoring {row['scoring_default']['windows']}/{row['scoring_default']['of']}", flush=True)
            if gate["full"]:
                versions.append(cand)
                merged_norm = norm({k: scale * v for k, v in delta.items()})
    return {"workload": workload, "rounds": rounds, "prs": rows, "seconds": round(time.perf_counter() - t0, 1),
            "policy": {"min_improvement": cfg.policy.min_improvement, "metric": cfg.policy.metric},
            "confidence": cfg.validators.confidence}


def _with_scoring(cfg, adv):
    return SimpleNamespace(policy=cfg.policy, validators=cfg.validators, scoring=adv.scoring)


def _mean_finite(xs: list[float]) -> float | None:
    xs = [x for x in xs if math.isfinite(x)]
    return math.fsum(xs) / len(xs) if xs else None


def summary(out: dict) -> dict:
    rows = out["prs"]
    g = [r["gate"] for r in rows]
    res = {"prs": len(rows), "gate_same": sum(x["full"] == x["sequential"] for x in g),
           "accepted_full": sum(x["full"] for x in g), "rejected_full": sum(not x["full"] for x in g),
           "early_rejections": sum(x["early"] for x in g),
           "gate_windows": {"full": sum(x["of"] for x in g), "sequential": sum(x["windows"] for x in g)},
           "rejected_windows": {"full": sum(x["of"] for x in g if not x["full"]),
                                "sequential": sum(x["windows"] for x in g if not x["full"])},
           "at_bar_rejected": _mean_finite([x["at_bar_rejected"] for x in g]),
           "at_bar_rejected_max": max((x["at_bar_rejected"] for x in g if math.isfinite(x["at_bar_rejected"])),
                                      default=None),
           "closest_early_rejection": min((x["improvement"] for x in g if x["early"]), default=None,
                                          key=lambda v: abs(v - out["policy"]["min_improvement"]))}
    for bar in BARS:
        b = [x["bars"][str(bar)] for x in g]
        res[f"bar {bar}"] = {"same": sum(f == q for f, q, _ in b), "rejected_full": sum(not f for f, _, _ in b),
                             "accepted_by_seq_rejected_by_full": sum(q and not f for f, q, _ in b),
                             "windows": {"full": sum(x["of"] for x in g), "sequential": sum(w for _, _, w in b)}}
    for name in ("scoring_default", "scoring_adversaries"):
        s = [r[name] for r in rows]
        res[name] = {"same_refusal": sum(x["full_refused"] == x["seq_refused"] for x in s),
                     "refused_full": sum(bool(x["full_refused"]) for x in s),
                     "same_mark": sum(x["full_mark"] == x["seq_mark"] for x in s),
                     "marked_full": sum(x["full_mark"] for x in s),
                     "windows": {"full": sum(x["of"] for x in s), "sequential": sum(x["windows"] for x in s)}}
    return res


def main() -> None:
    import torch

    torch.set_num_threads(1)  # a shared machine: one thread each spins less
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=["charlm", "transformers"], default="charlm")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--pretrain", type=int, default=300, help="transformers: steps of central pretraining")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="woolf-replay-", dir=a.workdir) as tmp:
        out = study(Path(tmp), a.workload, a.rounds, a.pretrain)
    out["machine"] = machine()
    out["load_average"] = {"start": start, "end": os.getloadavg()}
    out["summary"] = summary(out)
    print(json.dumps(out["summary"], indent=2), flush=True)
    print(f"wrote {write_json(a.out or f'decision_replay_{a.workload}.json', out)} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
