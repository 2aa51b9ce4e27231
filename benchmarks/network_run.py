"""A real network run (§4): the demo hub with 4 participants and 2 validators as processes.

Usage:
    python benchmarks/network_run.py                              # 4 participants x 4 rounds, 2 validators
    python benchmarks/network_run.py --participants 2 --rounds 1 --steps 10 --validators 1   # smoke

Reports merged versions per minute, validator utilisation (time inside
verdicts / validators x wall time), median staleness, and the loss curve next
to the in-process simulation's for the same settings (convergence.run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, machine, write_json  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--participants", type=int, default=4)
    ap.add_argument("--validators", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", default="network_run.json")
    args = ap.parse_args()

    import torch
    from convergence import run
    from rich.console import Console

    from woolf.forges.local import LocalForge
    from woolf.ledger import Ledger
    from woolf.network.demo import run_demo
    from woolf.workloads.charlm import CharLM

    with tempfile.TemporaryDirectory(prefix="woolf-net-") as tmp:
        res = run_demo(Path(tmp) / "hub", participants=args.participants, rounds=args.rounds,
                       validators=args.validators, steps=args.steps, console=Console(quiet=True), report=False)
        obs = Ledger.open(Path(tmp) / "hub" / "clones" / "observer")
        obs.fetch()
        obs.main_ref = "refs/remotes/origin/main"
        versions = list(reversed(obs.log()))
        prs = LocalForge.for_ledger(obs).list(local_only=True)
    judged = [p for p in prs if p.timings]
    busy = sum(sum(p.timings.values()) for p in judged)
    wall = res.wall_seconds
    network_curve = [(0, res.genesis_loss)] + [(v.version, v.metrics["loss"]) for v in versions if v.metrics]
    torch.set_num_threads(1)
    wl = CharLM()
    bench = wl.benchmark_bytes()
    sim = run("async", args.participants, 0, args.participants * args.rounds * args.steps, args.steps, wl,
              bench, stale="inverse", gate="tolerance")
    out = {
        "machine": machine(), "settings": vars(args), "wall_seconds": wall,
        "versions_merged": res.versions_merged, "prs": len(prs), "prs_rejected": res.prs_rejected,
        "merged_per_minute": res.versions_merged / (wall / 60),
        "validator_utilisation": busy / (args.validators * wall),
        "median_staleness": statistics.median(p.staleness for p in judged if p.staleness is not None),
        "genesis_loss": res.genesis_loss, "final_loss": res.final_loss, "baseline_loss": res.baseline_loss,
        "network_curve": network_curve,
        "simulation": {"final_loss": sim["final_loss"], "acceptance": sim["acceptance"],
                       "curve": [(p[1], p[3]) for p in sim["curve"]],
                       "median_staleness": statistics.median(sim["staleness"])},
    }
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(*zip(*network_curve, strict=True), marker="o", label="real network (processes)")
    ax.plot(*zip(*out["simulation"]["curve"], strict=True), marker=".", label="simulation, same settings")
    if res.baseline_loss:
        ax.axhline(res.baseline_loss, color="grey", ls="--", label="centralized, same steps")
    ax.set_xlabel("version")
    ax.set_ylabel("benchmark loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    fig.savefig(RESULTS / Path(args.out).with_suffix(".png").name, dpi=100)
    plt.close(fig)
    for k in ("wall_seconds", "versions_merged", "prs", "merged_per_minute", "validator_utilisation",
              "median_staleness", "genesis_loss", "final_loss", "baseline_loss"):
        print(f"{k:>24}: {out[k]}")
    print(f"{'simulation final':>24}: {sim['final_loss']}")
    print(write_json(args.out, out))


if __name__ == "__main__":
    main()
