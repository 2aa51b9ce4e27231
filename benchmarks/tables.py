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


LABELS = {"serial": "serial: one worker, all steps", "alone": "alone: one worker, its 1/N of the steps",
          "sync-dp": "synchronous data parallel", "sync-diloco": "synchronous DiLoCo (Nesterov 0.7/0.9)",
          "A0": "A0 today: fresh AdamW, 1/(1+s), gate vs current",
          "A1": "A1 + persistent optimizer state", "A2": "A2 + best-recent-version gate",
          "A3": "A3 + FedBuff (B = N, mean)", "A4": "A4 + delayed Nesterov (lr 0.5, mu 0.9)",
          "A4-noatt": "A4 without attenuation", "A5": "A5 + speed-aware steps",
          "A6": "A6 + error feedback", "A7": "A7 + follow the ledger (every 5 steps)",
          "A7-current": "A7 with the gate vs current", "A7-half": "A7 with alpha 0.5, gate vs current",
          "A8": "A8 = A7 + error feedback",
          "A6-compounding": "A6, first version (residuals compound)",
          "A8-compounding": "A8, first version (residuals compound)"}


def convergence(*names) -> None:
    rows = []
    for name in names or ("convergence.json",):
        data = load(name)
        if data:
            rows += data["rows"]
    if not rows:
        return
    regimes = sorted({r["regime"] for r in rows}, key=lambda x: (x.split("-")[1], x))
    for regime in regimes:
        sel = [r for r in rows if r["regime"] == regime]
        print(f"**{regime}** (genesis {sel[0]['genesis_loss']:.3f})\n")
        print("| N | arm | final loss (mean ± std) | vs alone | merged / judged |")
        print("|---|---|---|---|---|")
        alone = {r["n"]: r["final_mean"] for r in sel if r["arm"] == "alone"}
        for r in sel:
            merged = (f"{statistics.mean(r['merged']):.1f} / {statistics.mean(r['judged']):.1f}"
                      if r["merged"] and r["merged"][0] is not None else "-")
            gain = f"{alone[r['n']] - r['final_mean']:+.3f}" if r["n"] in alone else "-"
            print(f"| {r['n']} | {LABELS.get(r['arm'], r['arm'])} | {r['final_mean']:.4f} ± {r['final_std']:.4f} "
                  f"| {gain} | {merged} |")
        print()


def network(name="network_run.json") -> None:
    d = load(name)
    if not d:
        return
    print("| run | ledger | alone best / mean | data parallel | centralized | target | met | merged | "
          "median staleness | network s | references s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(d["runs"], 1):
        print(f"| {i} | {r['final_loss']:.4f} | {r['alone_loss']:.4f} / {r['alone_loss_mean']:.4f} | "
              f"{r['parallel_loss']:.4f} | {r['baseline_loss']:.4f} | {r['target']:.4f} | "
              f"{'yes' if r['target_met'] else 'no'} | {r['versions_merged']}/{r['versions_merged'] + r['prs_rejected']} "
              f"| {r['median_staleness']} | {r['network_seconds']:.0f} | {r['reference_seconds']:.0f} |")
    print()


if __name__ == "__main__":
    for fn in (ledger_ops, scale, convergence, network):
        fn()
