"""Voting overhead per PR: quorum 2 of 2 validators against a single validator (issue 14).

Usage:
    python benchmarks/quorum_overhead.py                      # demo-sized charlm, 8 PRs per mode per run, 2 runs
    python benchmarks/quorum_overhead.py --prs 1 --runs 1 --small    # the smoke size the tests run

Both modes use a signed ledger and a hub made by `woolf hub init` (the demo's set-up).
"single": validators.quorum = 1, one validator settles each PR (validate_one).
"quorum": validators.quorum = 2; for each PR, v1 evaluates and votes (pending), then v2
evaluates, votes, tallies and merges. With validators on their own machines they
evaluate at the same time, so a PR's wall time is the settling validator's (v2's)
validate_one; v1's is reported too (the compute a second validator adds, by design).
The two modes run side by side: their PRs are settled alternately, so that load from other
jobs falls on both alike, and the median of the paired per-PR differences is reported too.
Results go to benchmarks/results/quorum_overhead.json.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions

SMALL = {"workload.params.d_model": "32", "workload.params.n_layer": "1", "workload.params.context": "32",
         "workload.params.benchmark_bytes": "4096"}


def build(root: Path, quorum: int, small: bool):
    from woolf.git.keys import configure, create_key
    from woolf.git.repo import Git, clean_env
    from woolf.hub.create import init_hub
    from woolf.ledger.ledger import Ledger
    from woolf.protocol.signers import signer_line

    create_key(root / "keys" / "maintainer", "maintainer")
    lines = []
    for name in ("v1", "v2"):
        _, pub = create_key(root / "keys" / name, name)
        lines.append(signer_line(name, pub, ["validator"]))
    overrides = {"policy.min_improvement": "-1e9", "validators.quorum": str(quorum), **(SMALL if small else {})}
    Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), overrides=overrides,
                signing_key=root / "keys" / "maintainer", signer="maintainer", extra_signers=lines))
    init_hub(root / "hub.git", root / "work")
    for name in ("p", "v1", "v2"):
        subprocess.run(["git", "clone", "-q", str(root / "hub.git"), str(root / name)], check=True, env=clean_env())
    for name in ("v1", "v2"):
        configure(Git(root / name), root / "keys" / name)
    return Ledger.open(root / "p"), Ledger.open(root / "v1"), Ledger.open(root / "v2")


def prepare(root: Path, quorum: int, prs: int, small: bool):
    """A ledger with ``prs`` open PRs, and its two validators."""
    import torch
    from safetensors.torch import save_file

    from woolf.participant import submit
    from woolf.validator import Validator

    p, l1, l2 = build(root, quorum, small)
    base = p.load_weights(p.head())
    for i in range(prs):
        g = torch.Generator().manual_seed(i)
        trained = {k: t + torch.randn(t.shape, generator=g).to(t.dtype) * 1e-3 for k, t in base.items()}
        path = root / f"t{i}.safetensors"
        save_file(trained, path)
        submit(p, SubmitOptions(weights=path, base_version=0, contributor="p"))
    v1, v2 = Validator(l1, device="cpu", name="v1"), Validator(l2, device="cpu", name="v2")
    return v1, v2, sorted(pr.id for pr in v2.forge.list(state="open"))


def settle(v1, v2, sub_id: str, quorum: int) -> dict:
    first = 0.0
    if quorum > 1:
        t0 = time.perf_counter()
        assert v1.validate_one(sub_id) is None  # one vote is no quorum
        first = time.perf_counter() - t0
    t0 = time.perf_counter()
    verdict = v2.validate_one(sub_id)
    return {"seconds": time.perf_counter() - t0, "first_voter_seconds": first,
            "accepted": verdict.accepted, "timings": verdict.timings}


def one_run(root: Path, prs: int, small: bool) -> dict[str, list[dict]]:
    """Both modes side by side: their PRs are settled alternately (single, quorum, single, ...), so
    load from other jobs on a shared box falls on both alike."""
    modes = {"single": 1, "quorum": 2}
    ready = {mode: prepare(root / mode, k, prs, small) for mode, k in modes.items()}
    out: dict[str, list[dict]] = {mode: [] for mode in modes}
    for i in range(prs):
        for mode, k in (modes.items() if i % 2 == 0 else reversed(modes.items())):
            v1, v2, ids = ready[mode]
            out[mode].append(settle(v1, v2, ids[i], k))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prs", type=int, default=8)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    ap.add_argument("--out", default="quorum_overhead.json")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    per = {"single": [], "quorum": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            for mode, rows in one_run(Path(tmp) / f"run{r}", args.prs, args.small).items():
                per[mode] += rows
    summary = {}
    for mode, rows in per.items():
        assert all(r["accepted"] for r in rows), "every PR merges (min_improvement -1e9)"
        phases = sorted({k for row in rows for k in row["timings"]})
        summary[mode] = {"per_pr_median_s": statistics.median(r["seconds"] for r in rows), "prs": len(rows),
                         # evaluation is the same work in both modes and the noisiest phase on a shared box
                         "beyond_evaluation_median_s": statistics.median(
                             r["seconds"] - r["timings"].get("evaluation", 0.0) for r in rows),
                         # scoring evaluates too (assigned vs random shard): model compute, alike in both modes
                         "beyond_model_compute_median_s": statistics.median(
                             r["seconds"] - r["timings"].get("evaluation", 0.0) - r["timings"].get("scoring", 0.0)
                             for r in rows),
                         "first_voter_median_s": statistics.median(r["first_voter_seconds"] for r in rows),
                         "phases_median_s": {k: statistics.median(r["timings"].get(k, 0.0) for r in rows)
                                             for k in phases}}
    single, quorum = summary["single"]["per_pr_median_s"], summary["quorum"]["per_pr_median_s"]
    vote = summary["quorum"]["phases_median_s"].get("vote", 0.0)
    beyond = (summary["quorum"]["beyond_evaluation_median_s"] - summary["single"]["beyond_evaluation_median_s"])
    fixed = (summary["quorum"]["beyond_model_compute_median_s"]
             - summary["single"]["beyond_model_compute_median_s"])
    # the same PR index in both modes ran back to back: the median of those paired differences
    paired = statistics.median(q["seconds"] - s["seconds"] for q, s in zip(per["quorum"], per["single"], strict=True))
    result = {"machine": machine(), "model": "small" if args.small else "charlm demo defaults", "modes": summary,
              "overhead_s": quorum - single, "overhead_pct": 100 * (quorum - single) / single,
              "overhead_beyond_evaluation_s": beyond, "overhead_beyond_evaluation_pct": 100 * beyond / single,
              "overhead_beyond_model_compute_s": fixed, "overhead_beyond_model_compute_pct": 100 * fixed / single,
              "paired_overhead_median_s": paired, "paired_overhead_median_pct": 100 * paired / single,
              "vote_phase_s": vote, "vote_phase_pct": 100 * vote / single}
    path = write_json(args.out, result)
    print(f"settle per PR: single validator {single:.3f}s, quorum 2 (the settling validator) {quorum:.3f}s: "
          f"{result['overhead_pct']:+.1f}% (beyond evaluation {result['overhead_beyond_evaluation_pct']:+.1f}%); its vote phase {vote * 1000:.0f} ms ({result['vote_phase_pct']:.1f}%); "
          f"first voter {summary['quorum']['first_voter_median_s']:.3f}s")
    print(f"paired per-PR difference {paired * 1000:+.0f} ms ({result['paired_overhead_median_pct']:+.1f}%); "
          f"beyond model compute (evaluation, scoring) {fixed * 1000:+.0f} ms "
          f"({result['overhead_beyond_model_compute_pct']:+.1f}%)")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
