"""Does asynchronous ledger merging train as well as the alternatives, at equal compute? (§3)

Usage:
    python benchmarks/convergence.py                         # full grid, 3 seeds (about 30 min, 1 core)
    python benchmarks/convergence.py --smoke                 # seconds: the test suite's run

An in-process simulation of participants calling the same functions the
validator uses (compute_delta, attenuation, merge_scale, apply_delta, decide)
on the built-in charlm workload. Workers have log-normal speeds; each pulls the
current version, trains K steps, and its delta is validated when it finishes,
with staleness = versions merged meanwhile. Compared at equal total training
steps: serial (one worker), synchronous FedAvg of N workers per round, and
asynchronous merging with several staleness functions and gates.
Results: benchmarks/results/convergence.json and convergence_*.png.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, machine, write_json  # noqa: E402

from woolf.config import PolicyConfig, StalenessConfig  # noqa: E402
from woolf.core.merge import apply_delta, compute_delta, merge_scale  # noqa: E402
from woolf.core.policy import decide  # noqa: E402
from woolf.core.staleness import attenuation  # noqa: E402
from woolf.workloads.charlm import CharLM  # noqa: E402

GATES = {"none": None, "tolerance": -0.02, "strict": 0.0}


def run(scheme: str, n: int, seed: int, total: int, k: int, wl: CharLM, bench: bytes,
        stale: str = "inverse", gate: str = "none", alpha: float = 1.0, max_staleness: int = 64) -> dict:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    current = wl.genesis(0)
    evaluate = lambda w: wl.evaluate(w, bench)["loss"]  # noqa: E731
    curve = [(0, 0, 0.0, evaluate(current))]  # (steps, merges, sim time, loss)
    staleness_seen, accepted, judged = [], 0, 0
    if scheme == "fedavg":
        speeds = [rng.lognormvariate(0, 0.5) for _ in range(n)]
        steps = t = version = 0
        while steps + n * k <= total:
            deltas = []
            for w in range(n):
                trained, _ = wl.train(current, wl.default_data(f"w{w}", version), k, seed=seed * 7919 + steps + w)
                deltas.append(compute_delta(trained, current))
            mean = {name: sum(d[name] for d in deltas) / n for name in current}
            current = apply_delta(current, mean, merge_scale(alpha, 1.0))
            steps += n * k
            t += k / min(speeds)  # a synchronous round waits for the slowest worker
            version += 1
            accepted += n  # every worker's delta is used
            judged += n
            curve.append((steps, version, t, evaluate(current)))
    else:
        speeds = [rng.lognormvariate(0, 0.5) for _ in range(n)]
        policy = None if GATES[gate] is None else PolicyConfig(min_improvement=GATES[gate])
        scfg = {"inverse": StalenessConfig("inverse"), "polynomial": StalenessConfig("polynomial", a=0.5),
                "constant": StalenessConfig("constant"), "hinge": StalenessConfig("hinge", a=10, b=4)}[stale]
        version, steps = 0, 0
        bases = {w: (current, 0) for w in range(n)}
        queue = [(k / speeds[w], w) for w in range(n)]
        heapq.heapify(queue)
        cur_loss = curve[0][3]
        while steps + k <= total:
            t, w = heapq.heappop(queue)
            base, base_version = bases[w]
            trained, _ = wl.train(base, wl.default_data(f"w{w}", base_version), k, seed=seed * 7919 + steps)
            steps += k
            judged += 1
            s = version - base_version
            staleness_seen.append(s)
            if s <= max_staleness:
                cand = apply_delta(current, compute_delta(trained, base),
                                   merge_scale(alpha, attenuation(scfg, s)))
                cand_loss = evaluate(cand)
                ok = policy is None or decide(policy, {"loss": cur_loss}, {"loss": cand_loss}).accepted
                if ok:
                    current, cur_loss, version = cand, cand_loss, version + 1
                    accepted += 1
                    curve.append((steps, version, t, cur_loss))
            bases[w] = (current, version)
            heapq.heappush(queue, (t + k / speeds[w], w))
    final = evaluate(current)
    return {"final_loss": final, "curve": curve, "acceptance": accepted / max(judged, 1),
            "staleness": staleness_seen, "merges": accepted}


def grid(ns: list[int]) -> list[dict]:
    cells = [{"scheme": "serial", "n": 1, "stale": "inverse", "gate": "none"}]
    for n in ns:
        cells.append({"scheme": "fedavg", "n": n, "stale": "-", "gate": "-"})
        for stale in ("constant", "inverse", "polynomial"):
            cells.append({"scheme": "async", "n": n, "stale": stale, "gate": "tolerance"})
        for gate in ("none", "strict"):
            cells.append({"scheme": "async", "n": n, "stale": "inverse", "gate": gate})
    return cells


def alpha_grid(ns: list[int]) -> list[dict]:
    return [{"scheme": "async", "n": n, "stale": "inverse", "gate": "tolerance", "alpha": a}
            for n in ns for a in (0.5, 0.75, 1.0)]


def label(c: dict) -> str:
    if c["scheme"] == "serial":
        return "serial (1 worker)"
    if c["scheme"] == "fedavg":
        return f"FedAvg sync N={c['n']}"
    alpha = f" alpha={c['alpha']}" if "alpha" in c else ""
    return f"async N={c['n']} {c['stale']} gate={c['gate']}{alpha}"


def target_time(curve, target):
    for steps, _, t, loss in curve:
        if loss <= target:
            return steps, t
    return None, None


def plots(results: list[dict], n_plot: int) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    chosen = [r for r in results if r["cell"]["n"] in (1, n_plot)]
    for xkey, xlabel, fname in ((1, "merges (versions)", "convergence_vs_merges.png"),
                                (0, "total training steps", "convergence_vs_steps.png")):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in chosen:
            c = r["runs"][0]["curve"]
            ax.plot([p[xkey] for p in c], [p[3] for p in c], label=label(r["cell"]), lw=1.2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("benchmark loss (nats/byte)")
        ax.set_title(f"Loss against {xlabel} (seed 0, N={n_plot})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(RESULTS / fname, dpi=100)
        plt.close(fig)
        out.append(fname)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for r in results:
        if r["cell"]["scheme"] == "async" and r["cell"]["stale"] == "inverse" and r["cell"]["gate"] == "tolerance":
            seen = [s for run in r["runs"] for s in run["staleness"]]
            ax.hist(seen, bins=range(0, max(seen) + 2), alpha=0.5, label=f"N={r['cell']['n']}")
    ax.set_xlabel("staleness at validation")
    ax.set_ylabel("PRs")
    ax.set_title("Staleness histogram (async, inverse, tolerance gate; all seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "convergence_staleness.png", dpi=100)
    plt.close(fig)
    out.append("convergence_staleness.png")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="4,8,16")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--total-steps", type=int, default=800)
    ap.add_argument("--k", type=int, default=20, help="training steps per contribution")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--alpha-sweep", action="store_true", help="only async inverse+tolerance at alpha 0.5/0.75/1")
    ap.add_argument("--out", default="convergence.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.smoke:
        args.workers, args.seeds, args.total_steps, args.k = "2", 1, 8, 2
    wl = CharLM(d_model=48, n_layer=2, context=48, batch_size=16, benchmark_bytes=4096)
    bench = wl.benchmark_bytes()
    ns = [int(x) for x in args.workers.split(",")]
    results, t0 = [], time.time()
    for cell in (alpha_grid(ns) if args.alpha_sweep else grid(ns)):
        runs = [run(cell["scheme"], cell["n"], seed, args.total_steps, args.k, wl, bench,
                    stale=cell["stale"] if cell["stale"] != "-" else "inverse",
                    gate=cell["gate"] if cell["gate"] != "-" else "none", alpha=cell.get("alpha", 1.0))
                for seed in range(args.seeds)]
        finals = [r["final_loss"] for r in runs]
        row = {"cell": cell, "label": label(cell), "final_mean": statistics.mean(finals),
               "final_std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
               "acceptance_mean": statistics.mean(r["acceptance"] for r in runs),
               "merges_mean": statistics.mean(r["merges"] for r in runs), "runs": runs}
        results.append(row)
        print(f"{row['label']:<40} final {row['final_mean']:.4f} ± {row['final_std']:.4f}  "
              f"accepted {row['acceptance_mean']:.0%}  ({time.time() - t0:.0f}s)", flush=True)
    serial = results[0]["final_mean"]
    target = serial + 0.10
    for row in results:
        hits = [target_time(r["curve"], target) for r in row["runs"]]
        row["target_loss"] = target
        row["steps_to_target"] = [h[0] for h in hits]
        row["sim_time_to_target"] = [h[1] for h in hits]
    data = {"machine": machine(), "settings": vars(args), "results": results}
    if not args.smoke and not args.alpha_sweep:
        data["plots"] = plots(results, n_plot=ns[len(ns) // 2])
    print(write_json(args.out, data))


if __name__ == "__main__":
    main()
