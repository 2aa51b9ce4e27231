"""Print the markdown tables of benchmarks/RESULTS.md from the JSON files in benchmarks/results/.

Usage:
    python benchmarks/tables.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def load(name):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def ledger_ops() -> None:
    data = load("ledger_ops.json")
    if not data:
        return
    print("| params | operation | seconds | raw I/O floor | md5 | x (I/O + md5) | x raw I/O | peak RSS MiB | tensors MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size, block in data["sizes"].items():
        for r in block["ops"]:
            spent = r.get("beyond_eval_seconds", r["seconds"])
            print(f"| {int(size) / 1e6:g}M | {r['op']} | {spent:.3f} | {r['floor_seconds']:.3f} | "
                  f"{r['md5_seconds']:.3f} | {r['ratio_to_floor']:.2f} | {r['ratio_to_raw_io']:.1f} | "
                  f"{r['peak_rss_mib']:.0f} | {r['tensor_bytes'] / 2**20:.0f} |")
    print()
    for size, block in data["sizes"].items():
        for r in block["ops"]:
            if r.get("breakdown"):
                parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["breakdown"].items(), key=lambda kv: -kv[1]))
                print(f"- {int(size) / 1e6:g}M {r['op']}: {parts}")
    print()


def scale() -> None:
    data = load("scale.json")
    if not data:
        return
    print("| versions | git log + parse (library) | `woolf log -n 20 --json` | `woolf log --json` (all) | show middle | staleness from v0 |")
    print("|---|---|---|---|---|---|")
    for h in data["history"]:
        print(f"| {h['versions']:,} | {h['log_all_seconds']:.3f} | {h['cli_log_20_json_seconds']:.3f} | "
              f"{h['cli_log_all_json_seconds']:.3f} | {h['show_middle_seconds']:.3f} | "
              f"{h['staleness_from_v0_seconds']:.3f} |")
    q = data["queue"]
    print(f"\nQueue of {q['prs']} PRs: {q['prs_per_second']:.2f} PRs/s, per-PR overhead "
          f"{q['per_pr_overhead_seconds']:.3f} s ({', '.join(f'{k} {v:.3f}' for k, v in q['per_pr_breakdown_seconds'].items())}); "
          f"submit {q['submit_seconds_mean']:.3f} s each; staleness up to {q['max_staleness_seen']}.\n")


TARGET = 2.90  # nats/byte: reached by most configurations within the budget


def _first(curve, target):
    for steps, _, t, loss in curve:
        if loss <= target:
            return steps, t
    return None, None


def convergence(name="convergence.json") -> None:
    data = load(name)
    if not data:
        return
    print(f"| configuration | final loss (mean ± std, {data['settings']['seeds']} seeds) | accepted | deltas merged "
          f"| staleness median / max | steps to {TARGET} | sim time to {TARGET} |")
    print("|---|---|---|---|---|---|---|")
    for r in data["results"]:
        stale = [s for run in r["runs"] for s in run["staleness"]]
        st = f"{statistics.median(stale):.0f} / {max(stale)}" if stale else "-"
        hits = [_first(run["curve"], TARGET) for run in r["runs"]]
        hit = [h[0] for h in hits if h[0] is not None]
        tt = [h[1] for h in hits if h[1] is not None]
        steps = f"{statistics.mean(hit):.0f} ({len(hit)}/{len(hits)})" if hit else "not reached"
        simt = f"{statistics.mean(tt):.1f}" if tt else "-"
        print(f"| {r['label']} | {r['final_mean']:.4f} ± {r['final_std']:.4f} | {r['acceptance_mean']:.0%} | "
              f"{r['merges_mean']:.1f} | {st} | {steps} | {simt} |")
    print()


def network() -> None:
    d = load("network_run.json")
    if not d:
        return
    for k in ("wall_seconds", "versions_merged", "prs", "prs_rejected", "merged_per_minute", "validator_utilisation",
              "median_staleness", "genesis_loss", "final_loss", "baseline_loss"):
        v = d[k]
        print(f"- {k}: {v:.3f}" if isinstance(v, float) else f"- {k}: {v}")
    print(f"- simulation (same settings): final {d['simulation']['final_loss']:.3f}, accepted "
          f"{d['simulation']['acceptance']:.0%}, median staleness {d['simulation']['median_staleness']}")


if __name__ == "__main__":
    for fn in (ledger_ops, scale, convergence, lambda: convergence("convergence_alpha.json"), network):
        fn()
