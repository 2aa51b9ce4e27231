"""Does joining the ledger pay? Merge rules and participant state at equal compute (§3).

Usage:
    python benchmarks/convergence.py                    # the study grid (about 40 min on 2 cores)
    python benchmarks/convergence.py --smoke            # seconds: the test suite's run
    python benchmarks/convergence.py --arms A1,A7 --workers 4 --regimes scratch-iid --seeds 3

An in-process simulation of N participants and an instant validator, built
from the functions the ledger itself runs: the workload's ``train`` with a
persistent optimizer state directory, ``merge_step`` under a ``Rule``,
``attenuation``, ``decide`` and the best-version reference, and the follower's
rebase arithmetic (``local += new - old``). Workers have log-normal speeds
(simulated time); each trains K steps (in chunks of R when it follows the
ledger) from the version it pulled, and its delta is judged when it finishes.

Arms (cumulative, as in the issue): A0 today (fresh AdamW per contribution,
attenuated 1/(1+s), tolerance gate against the current version); A1 +
persistent optimizer state; A2 + best-recent-version gate; A3 + FedBuff (B);
A4 + delayed Nesterov (outer lr, momentum 0.9, with or without attenuation);
A5 + speed-aware steps; A6 + error feedback (a rejected or attenuated
remainder is carried into the next delta); A7 + following the ledger while
training (rebase every R steps); A8 = A7 + A6. Controls at the same total
steps: serial (one worker, all steps), alone (one worker, its 1/N share),
synchronous data parallel (N workers, gradients averaged every step) and
synchronous DiLoCo (outer Nesterov 0.7/0.9 every K steps).

Regimes: ``scratch`` (random genesis) or ``continued`` (genesis pretrained
centrally first), times ``iid`` (every worker samples the whole pool, the
default shards) or ``domain`` (each worker's data is a distinct part of the
corpus; the benchmark spans all). Results: benchmarks/results/convergence.json.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, machine, write_json  # noqa: E402

from woolf.core.merge_rules import Rule, merge_step  # noqa: E402
from woolf.core.policy import decide  # noqa: E402
from woolf.core.staleness import attenuation  # noqa: E402
from woolf.protocol.config import PolicyConfig, StalenessConfig  # noqa: E402
from woolf.workloads import charlm_pretrained as pretrained  # noqa: E402
from woolf.workloads import corpus  # noqa: E402
from woolf.workloads.base import TrainData  # noqa: E402
from woolf.workloads.charlm import CharLM  # noqa: E402
from woolf.workloads.charlm_data import domain_files  # noqa: E402

BASE = {"persistent": False, "rule": "attenuated", "stale": "inverse", "gate": "current", "tol": 0.02,
        "speed_aware": False, "ef": False, "follow": 0}
ARMS = {
    "A0": {},
    "A1": {"persistent": True},
    "A1-ls": {"persistent": True, "ls": True},  # the validator picks the best of att x {0.5, 1, 2} on the benchmark
    "A2": {"persistent": True, "gate": "best"},
    "A3": {"persistent": True, "gate": "best", "rule": "fedbuff", "stale": "constant"},
    "A4": {"persistent": True, "gate": "best", "rule": "delayed_nesterov", "olr": 0.5},
    "A4-noatt": {"persistent": True, "gate": "best", "rule": "delayed_nesterov", "olr": 0.5,
                 "stale": "constant"},
    "A5": {"persistent": True, "gate": "best", "speed_aware": True},
    "A6": {"persistent": True, "gate": "best", "ef": True},
    "A7": {"persistent": True, "gate": "best", "follow": 5},
    "A7-current": {"persistent": True, "follow": 5},
    "A7-half": {"persistent": True, "follow": 5, "alpha": 0.5},
    "A1-half": {"persistent": True, "alpha": 0.5},
    "A1-poly": {"persistent": True, "stale": "polynomial"},
    # the real network's latency (lat: a verdict takes this many contributions' time, 2 validators)
    "L-A1": {"persistent": True, "lat": 1.0},
    "L-A1-half": {"persistent": True, "lat": 1.0, "alpha": 0.5},
    "L-A1-poly": {"persistent": True, "lat": 1.0, "stale": "polynomial"},
    "L-A1-const": {"persistent": True, "lat": 1.0, "stale": "constant"},
    # ... and each participant waits for its own PR's verdict before it pulls and trains again
    "L-A1-wait": {"persistent": True, "lat": 1.0, "wait": True},
    "L-A1-wait-poly": {"persistent": True, "lat": 1.0, "wait": True, "stale": "polynomial"},
    "A8": {"persistent": True, "gate": "best", "follow": 5, "ef": True},
}
CONTROLS = ("serial", "alone", "sync-dp", "sync-diloco")


def model(kind: str = "small") -> CharLM:
    if kind == "demo":  # the size `woolf demo` trains (charlm's defaults)
        return CharLM()
    return CharLM(d_model=48, n_layer=2, n_head=4, context=48, batch_size=16, benchmark_bytes=8192,
                  shard_files=8)


def domain_data(wl: CharLM, worker: int, n: int, version: int) -> TrainData:
    """Worker ``worker``'s own part of the corpus (files hashed into its domain), a shard per version."""
    files = list(domain_files(worker, n))  # the parts `woolf demo`'s domains use (charlm_data.py)
    rng = random.Random(f"domain:{worker}:{version}")
    pick = sorted(rng.sample(files, min(wl.shard_files, len(files))))
    return TrainData([corpus.read(f) for f in pick], f"domain{worker}@v{version}", pick)


class World:
    def __init__(self, wl: CharLM, bench: bytes, genesis, data_regime: str, n: int):
        self.wl, self.bench, self.genesis, self.data_regime, self.n = wl, bench, genesis, data_regime, n

    def data(self, w: int, version: int) -> TrainData:
        if self.data_regime == "domain":
            return domain_data(self.wl, w, self.n, version)
        return self.wl.default_data(f"w{w}", version)

    def pooled(self, w: int, rounds: int) -> TrainData:
        texts, files = [], []
        for r in range(rounds):
            d = self.data(w, r)
            texts += d.texts
            files += d.files
        return TrainData(texts, f"w{w} pooled", files)

    def loss(self, weights) -> float:
        return self.wl.evaluate(weights, self.bench)["loss"]


def sub(a, b):
    return {k: a[k] - b[k] for k in a}


def add(a, b, s=1.0):
    return {k: a[k] + s * b[k] for k in a}


def run_async(world: World, arm: dict, n: int, total: int, k: int, seed: int) -> dict:
    a = {**BASE, **arm}
    rng = random.Random(seed)
    speeds = [rng.lognormvariate(0, 0.5) for _ in range(n)]
    if a["speed_aware"]:  # steps proportional to speed: everyone submits at about the same interval
        mean = statistics.mean(speeds)
        ks = [max(2, round(k * s / mean)) for s in speeds]
    else:
        ks = [k] * n
    rule = Rule(a["rule"], a.get("alpha", 1.0), a.get("olr", 1.0 if a["rule"] == "fedbuff" else 0.7),
                0.0 if a["rule"] == "fedbuff" else 0.9, a.get("buffer", n))
    scfg = StalenessConfig(a["stale"])
    policy = PolicyConfig(min_improvement=-a["tol"])
    cur, state = world.genesis, None
    cur_loss = world.loss(cur)
    history = [cur_loss]
    version, steps, merged, judged = 0, 0, 0, 0
    curve = [(0, 0, 0.0, cur_loss)]
    tmp = tempfile.TemporaryDirectory()
    local = {}
    resid = {}
    chunk = lambda w: a["follow"] or ks[w]  # noqa: E731
    # lat > 0: a validator takes lat x K time units per PR (validators of their own, a queue), and the
    # worker pulls the newest version and trains on right away, without waiting for its verdict: the
    # real network's dynamics (RESULTS.md §4), where PRs merge at staleness well above N - 1.
    lat, free = a.get("lat", 0.0) * k, [0.0] * a.get("validators", 2)
    queue, seq = [], 0
    for w in range(n):
        local[w] = {"weights": cur, "base": cur, "bv": 0, "done": 0, "start_v": 0}
        heapq.heappush(queue, (chunk(w) / speeds[w], (seq := seq + 1), "train", w, None))
    calls = 0

    def judge(t, w, own, delta, bv):
        nonlocal cur, state, version, cur_loss, merged, judged, seq
        s = version - bv
        att = attenuation(scfg, s)
        step = merge_step(rule, cur, state, delta, att)
        probe_loss = world.loss(step.probe)
        for scale in sorted({att * 0.5, min(1.5, att * 2.0)}) if a.get("ls") else ():
            other = merge_step(rule, cur, state, delta, scale)  # a line search along the delta
            other_loss = world.loss(other.probe)
            if other_loss < probe_loss:
                step, probe_loss = other, other_loss
        ref = min(history[-8:]) if a["gate"] == "best" else cur_loss
        ok = decide(policy, {"loss": ref}, {"loss": probe_loss}).accepted
        judged += 1
        if ok:
            cur, state, version = step.candidate, step.state, version + 1
            cur_loss = probe_loss if step.applied else cur_loss
            history.append(cur_loss)
            merged += 1
            curve.append((steps, version, t, cur_loss))
            if a["ef"] and rule.kind == "attenuated" and step.scale < 1.0:  # work carried at most once
                resid[w] = {kk: v * (1.0 - step.scale) for kk, v in own.items()}
        elif a["ef"]:
            resid[w] = own
        if a.get("wait"):  # the worker waited for this verdict: it pulls the version it made, trains on
            local[w].update(weights=cur, base=cur, bv=version, done=0, start_v=version)
            heapq.heappush(queue, (t + chunk(w) / speeds[w], (seq := seq + 1), "train", w, None))

    while queue:
        t, _, kind, w, payload = heapq.heappop(queue)
        if kind == "judge":
            judge(t, w, *payload)
            continue
        if steps >= total:
            continue  # training is over; verdicts still pending are drained
        L = local[w]
        if a["follow"] and L["bv"] != version:  # rebase local progress onto the newest version
            L["weights"] = add(cur, sub(L["weights"], L["base"]))
            L["base"], L["bv"] = cur, version
        todo = min(chunk(w), ks[w] - L["done"])
        sdir = Path(tmp.name) / f"w{w}" if a["persistent"] else None
        calls += 1
        L["weights"], _ = world.wl.train(L["weights"], world.data(w, L["start_v"]), todo,
                                         seed=seed * 100003 + calls, state_dir=sdir)
        L["done"] += todo
        steps += todo
        if L["done"] < ks[w]:
            heapq.heappush(queue, (t + chunk(w) / speeds[w], (seq := seq + 1), "train", w, None))
            continue
        own = sub(L["weights"], L["base"])
        delta = add(own, resid.pop(w)) if a["ef"] and w in resid else own
        if lat > 0:
            i = min(range(len(free)), key=free.__getitem__)
            free[i] = max(t, free[i]) + lat
            heapq.heappush(queue, (free[i], (seq := seq + 1), "judge", w, (own, delta, L["bv"])))
            if a.get("wait"):
                continue
        else:
            judge(t, w, own, delta, L["bv"])
        L.update(weights=cur, base=cur, bv=version, done=0, start_v=version)
        heapq.heappush(queue, (t + chunk(w) / speeds[w], (seq := seq + 1), "train", w, None))
    tmp.cleanup()
    final = world.loss(cur)
    return {"final_loss": final, "merged": merged, "judged": judged, "curve": curve}


def run_control(world: World, kind: str, n: int, total: int, k: int, seed: int) -> dict:
    wl = world.wl
    per = total // n
    if kind == "serial":
        data = TrainData([], "all", [])
        for w in range(n):
            d = world.pooled(w, max(1, per // k))
            data.texts += d.texts
        out, _ = wl.train(world.genesis, data, total, seed=seed)
    elif kind == "alone":
        out, _ = wl.train(world.genesis, world.pooled(0, max(1, per // k)), per, seed=seed)
    elif kind == "sync-dp":
        out = wl.train_data_parallel(world.genesis, [world.pooled(w, max(1, per // k)) for w in range(n)],
                                     per, seed=seed)
    else:  # synchronous DiLoCo: K local steps per worker, outer Nesterov on the mean delta
        rule = Rule("nesterov", 1.0, 0.7, 0.9)
        cur, state = world.genesis, None
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(per // k):
                deltas = []
                for w in range(n):
                    trained, _ = wl.train(cur, world.data(w, r), k, seed=seed * 1000 + r * n + w,
                                          state_dir=Path(tmp) / f"w{w}")
                    deltas.append(sub(trained, cur))
                mean = {kk: sum(d[kk] for d in deltas) / n for kk in cur}
                step = merge_step(rule, cur, state, mean, 1.0)
                cur, state = step.candidate, step.state
        out = cur
    return {"final_loss": world.loss(out)}


def make_world(wl: CharLM, bench: bytes, regime: str, n: int, pretrain: int) -> World:
    start, data_regime = regime.split("-")
    genesis = wl.genesis(0)
    if start == "continued":  # the pretrained genesis `woolf demo` starts from (charlm_pretrained.py)
        genesis = pretrained.build(wl, pretrain)
    return World(wl, bench, genesis, data_regime, n)


def plot(names: list[str]) -> Path:
    """One bar chart of final loss per arm and regime from result files (benchmarks/results/)."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for n in names for r in json.loads((RESULTS / n).read_text())["rows"]]
    regimes = sorted({r["regime"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes), 4.2), squeeze=False)
    for ax, regime in zip(axes[0], regimes, strict=True):
        sel = {r["arm"]: r for r in rows if r["regime"] == regime}
        names_ = [a for a in arms if a in sel]
        ax.barh(names_, [sel[a]["final_mean"] for a in names_], xerr=[sel[a]["final_std"] for a in names_],
                color=["#999999" if a in CONTROLS else "#2a9d8f" for a in names_])
        if "alone" in sel:
            ax.axvline(sel["alone"]["final_mean"], color="#e76f51", ls=":", label="alone")
        if "sync-dp" in sel:
            ax.axvline(sel["sync-dp"]["final_mean"], color="#264653", ls="-.", label="data parallel")
        lo = min(sel[a]["final_mean"] for a in names_)
        ax.set_xlim(lo - 0.05, min(max(sel[a]["final_mean"] for a in names_), lo + 0.6) + 0.05)
        ax.invert_yaxis()
        ax.set_title(f"{regime}, N={sel[names_[0]]['n']}", fontsize=9)
        ax.set_xlabel("final benchmark loss (3 seeds)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = RESULTS / "convergence_arms.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", nargs="+", metavar="RESULT_JSON", help="only draw convergence_arms.png from these")
    ap.add_argument("--arms", default=",".join([*CONTROLS, "A0", "A1", "A2", "A3", "A4", "A6", "A7", "A8"]))
    ap.add_argument("--workers", default="4")
    ap.add_argument("--regimes", default="scratch-iid,continued-iid,scratch-domain,continued-domain")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--total-steps", type=int, default=800)
    ap.add_argument("--k", type=int, default=20, help="steps per contribution")
    ap.add_argument("--pretrain", type=int, default=800, help="continued regime: central steps before genesis")
    ap.add_argument("--model", choices=["small", "demo"], default="small",
                    help="small: d48 (the grid); demo: charlm's defaults, the size `woolf demo` trains")
    ap.add_argument("--optimizer-warmup", type=int, default=0,
                    help="charlm's optimizer_warmup for every run (woolf demo's continued regimes: 60)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default="convergence.json")
    args = ap.parse_args()
    if args.plot:
        print(plot(args.plot))
        return
    torch.set_num_threads(1)
    if args.smoke:
        args.arms, args.workers, args.regimes = "serial,alone,sync-dp,sync-diloco,A0,A7,A3", "2", "scratch-iid"
        args.seeds, args.total_steps, args.k, args.pretrain = 1, 16, 4, 4
    wl = model(args.model)
    wl.optimizer_warmup = args.optimizer_warmup
    bench = wl.benchmark_bytes()
    rows, t0 = [], time.time()
    for regime in args.regimes.split(","):
        for n in (int(x) for x in args.workers.split(",")):
            world = make_world(wl, bench, regime, n, args.pretrain)
            for arm in args.arms.split(","):
                runs = []
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    if arm in CONTROLS:
                        runs.append(run_control(world, arm, n, args.total_steps, args.k, seed))
                    else:
                        runs.append(run_async(world, ARMS[arm], n, args.total_steps, args.k, seed))
                finals = [r["final_loss"] for r in runs]
                row = {"regime": regime, "n": n, "arm": arm, "total_steps": args.total_steps, "k": args.k,
                       "final_mean": statistics.mean(finals),
                       "final_std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
                       "finals": finals, "genesis_loss": world.loss(world.genesis),
                       "merged": [r.get("merged") for r in runs], "judged": [r.get("judged") for r in runs],
                       "curves": [r.get("curve") for r in runs]}
                rows.append(row)
                print(f"{regime:<17} N={n:<3} {arm:<12} {row['final_mean']:.4f} ± {row['final_std']:.4f}  "
                      f"merged {row['merged']}  ({time.time() - t0:.0f}s)", flush=True)
                # after every row, so that a study cut short keeps what it measured
                path = write_json(args.out, {"machine": machine(), "settings": vars(args), "arms": ARMS,
                                             "rows": rows})
    print(path)


if __name__ == "__main__":
    main()
