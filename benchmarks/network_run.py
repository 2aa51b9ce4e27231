"""Real network runs (§4): `woolf demo` as processes, repeated, against its reference lines.

Usage:
    python benchmarks/network_run.py                           # the demo's defaults, 3 runs
    python benchmarks/network_run.py --regime scratch-iid --out network_run_scratch_iid.json
    python benchmarks/network_run.py --runs 1 --set workload.follow_every=0
    python benchmarks/network_run.py --participants 2 --rounds 1 --steps 5 --validators 1 --runs 1  # smoke

Per run: the ledger's final loss, each participant alone (best, mean),
synchronous data parallel and centralized at the same compute, whether the
issue's target holds (final <= alone - 0.5 * (alone - parallel)), merges,
median staleness, validator utilisation, and network / reference wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, machine, write_json  # noqa: E402

from woolf.demo.run import DemoOptions


def one_run(args, settings: dict) -> dict:
    from rich.console import Console

    from woolf.demo.run import run_demo
    from woolf.forges.local import LocalForge
    from woolf.ledger.ledger import Ledger

    with tempfile.TemporaryDirectory(prefix="woolf-net-") as tmp:
        res = run_demo(Path(tmp) / "hub", DemoOptions(participants=args.participants, rounds=args.rounds,
                       validators=args.validators, steps=args.steps, console=Console(quiet=True),
                       report=False, settings=settings, regime=args.regime,
                       **({} if args.wait_verdict is None else {"wait_verdict": args.wait_verdict})))
        obs = Ledger.open(Path(tmp) / "hub" / "clones" / "observer")
        obs.fetch()
        obs.main_ref = "refs/remotes/origin/main"
        versions = list(reversed(obs.log()))
        prs = LocalForge.for_ledger(obs).list(local_only=True)
    judged = [p for p in prs if p.timings]
    busy = sum(sum(p.timings.values()) for p in judged)
    r = res.to_json()
    target = (r["alone_loss"] - 0.5 * (r["alone_loss"] - r["parallel_loss"])
              if r["alone_loss"] is not None and r["parallel_loss"] is not None else None)
    stale = [p.staleness for p in judged if p.staleness is not None]
    gap = r["alone_loss"] - r["parallel_loss"] if target is not None else None
    return {"regime": r["regime"],
            "gap_closed": (r["alone_loss"] - r["final_loss"]) / gap if gap and gap > 0 else None,
            **{k: r[k] for k in ("final_loss", "alone_loss", "alone_loss_mean", "alone_losses", "parallel_loss",
                                 "baseline_loss", "genesis_loss", "versions_merged", "prs_rejected",
                                 "network_seconds", "reference_seconds", "wall_seconds")},
            "target": target, "target_met": target is not None and r["final_loss"] <= target,
            "median_staleness": statistics.median(stale) if stale else None,
            "validator_utilisation": busy / (args.validators * max(res.network_seconds, 1e-9)),
            "curve": [(v.version, v.metrics["loss"]) for v in versions if v.metrics]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--participants", type=int, default=3)
    ap.add_argument("--validators", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wait-verdict", type=float, default=None, help="seconds (None: the demo's default)")
    ap.add_argument("--regime", default="continued-domain",
                    choices=["continued-domain", "continued-iid", "scratch-domain", "scratch-iid"])
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default="network_run.json")
    args = ap.parse_args()
    settings = dict(item.split("=", 1) for item in args.settings)
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args, settings))
        r = runs[-1]
        print(f"run {i + 1}: final {r['final_loss']:.4f}  alone {r['alone_loss']:.4f} (mean "
              f"{r['alone_loss_mean']:.4f})  parallel {r['parallel_loss']:.4f}  centralized "
              f"{r['baseline_loss']:.4f}  target {r['target']:.4f} met={r['target_met']}  merged "
              f"{r['versions_merged']}/{r['versions_merged'] + r['prs_rejected']}  gap closed "
              f"{r['gap_closed'] if r['gap_closed'] is None else round(100 * r['gap_closed'])}%  network "
              f"{r['network_seconds']:.0f}s refs {r['reference_seconds']:.0f}s", flush=True)
    out = {"machine": machine(), "settings": {**vars(args), "settings": settings}, "runs": runs}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for i, r in enumerate(runs):
        ax.plot(*zip(*r["curve"], strict=True), marker=".", alpha=0.8, label=f"ledger, run {i + 1}")
    first = runs[0]
    for key, label, style in (("alone_loss", "best participant alone", ":"),
                              ("parallel_loss", "synchronous data parallel", "-."),
                              ("baseline_loss", "centralized", "--")):
        ax.axhline(first[key], color="grey", ls=style, label=label)
    ax.set_xlabel("version")
    ax.set_ylabel("benchmark loss")
    ax.set_ylim(top=min(4.0, max(p[1] for r in runs for p in r["curve"])))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    fig.savefig(RESULTS / Path(args.out).with_suffix(".png").name, dpi=100)
    plt.close(fig)
    print(write_json(args.out, out))


if __name__ == "__main__":
    main()
