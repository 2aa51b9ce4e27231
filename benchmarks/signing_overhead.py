"""Signing and verification overhead per PR on validate, with the demo's workload (issue 12).

Usage:
    python benchmarks/signing_overhead.py                   # demo-sized charlm, 4 PRs per run, 2 runs per mode
    python benchmarks/signing_overhead.py --prs 2 --runs 1 --small    # the smoke size the tests run

Two ledgers per run, built the same way except for authority: "unsigned" is the
code before issue 12 (no allowed_signers, a plain `git clone --bare` hub
without hooks); "signed" has allowed_signers, a hub made by `woolf hub init`
(its pre-receive hook checks every push) and a validator with an SSH key, so
each PR pays for: main's head and config verified in fresh(), the submitter's
signature checked, the version or rejection commit signed, and the hook. The
modes alternate so that a noisy machine hits both. Results go to
benchmarks/results/signing_overhead.json.
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


def build(root: Path, signed: bool, small: bool):
    from woolf.git.keys import configure, create_key
    from woolf.git.repo import Git, clean_env
    from woolf.hub.create import init_hub
    from woolf.ledger.ledger import Ledger
    from woolf.protocol.signers import signer_line

    overrides = {"policy.min_improvement": "-1e9", **(SMALL if small else {})}
    signing = {}
    if signed:
        create_key(root / "keys" / "maintainer", "maintainer")
        _, vpub = create_key(root / "keys" / "v", "v")
        signing = {"signing_key": root / "keys" / "maintainer", "signer": "maintainer",
                   "extra_signers": [signer_line("v", vpub, ["validator"])]}
    Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), overrides=overrides, **signing))
    if signed:
        init_hub(root / "hub.git", root / "work")
    else:
        subprocess.run(["git", "clone", "-q", "--bare", str(root / "work"), str(root / "hub.git")],
                       check=True, env=clean_env())
    for name in ("p", "v"):
        subprocess.run(["git", "clone", "-q", str(root / "hub.git"), str(root / name)], check=True, env=clean_env())
    if signed:
        configure(Git(root / "v"), root / "keys" / "v")
    return Ledger.open(root / "p"), Ledger.open(root / "v")


def one_run(root: Path, signed: bool, prs: int, small: bool) -> list[dict]:
    import torch
    from safetensors.torch import save_file

    from woolf.participant import submit
    from woolf.validator import Validator

    p, v = build(root, signed, small)
    base = p.load_weights(p.head())
    for i in range(prs):
        g = torch.Generator().manual_seed(i)
        trained = {k: t + torch.randn(t.shape, generator=g).to(t.dtype) * 1e-3 for k, t in base.items()}
        path = root / f"t{i}.safetensors"
        save_file(trained, path)
        submit(p, SubmitOptions(weights=path, base_version=0, contributor="p"))
    val = Validator(v, device="cpu", name="v")
    out = []
    for pr in sorted(val.forge.list(state="open"), key=lambda x: x.id):
        t0 = time.perf_counter()
        verdict = val.validate_one(pr.id)
        out.append({"seconds": time.perf_counter() - t0, "accepted": verdict.accepted,
                    "timings": verdict.timings})
    return out


def components(root: Path) -> dict:
    """The signed mode's own costs, measured alone (median of 10)."""
    from woolf.ledger import trust
    from woolf.ledger.ledger import Ledger
    from woolf.protocol.rules.submitter import check_submitter

    v = Ledger.open(root / "v")
    v.main_ref = "refs/remotes/origin/main"
    head = v.head()
    tree = v.git.out("rev-parse", f"{head.commit}^{{tree}}")

    def med(fn) -> float:
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    key = v.git.sign_key
    sign = med(lambda: v.git.commit_tree(tree, "x\n", [head.commit]))
    v.git.sign_key = None
    plain = med(lambda: v.git.commit_tree(tree, "x\n", [head.commit]))
    v.git.sign_key = key

    def verify():
        trust._TRUSTED.clear()
        trust.require_validator(v, head)

    from woolf.forges.local import LocalForge

    pr = LocalForge.for_ledger(v).list()[0]
    return {"sign_commit": sign - plain, "verify_head_and_key": med(verify),
            "check_submitter": med(lambda: check_submitter(v, pr, head))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prs", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    ap.add_argument("--out", default="signing_overhead.json")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    per = {"unsigned": [], "signed": []}
    comp = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            for mode in ("unsigned", "signed"):
                root = Path(tmp) / f"{mode}{r}"
                per[mode] += one_run(root, mode == "signed", args.prs, args.small)
                if mode == "signed" and not comp:
                    comp = components(root)
    summary = {}
    for mode, rows in per.items():
        phases = sorted({k for row in rows for k in row["timings"]})
        summary[mode] = {"per_pr_median_s": statistics.median(r["seconds"] for r in rows), "prs": len(rows),
                         "phases_median_s": {k: statistics.median(r["timings"].get(k, 0.0) for r in rows)
                                             for k in phases}}
    # The totals differ by evaluation noise on a shared machine as much as by signing, so the
    # overhead is also summed from where signing happens: fetch (main's head verified), push (the
    # hub's hook), checks, plus the two steps outside any timer (signing the commit, the submitter).
    s_ph, u_ph = summary["signed"]["phases_median_s"], summary["unsigned"]["phases_median_s"]
    by_phase = {k: s_ph.get(k, 0.0) - u_ph.get(k, 0.0) for k in ("fetch", "push", "checks")}
    overhead = sum(by_phase.values()) + comp.get("sign_commit", 0.0) + comp.get("check_submitter", 0.0)
    base = summary["unsigned"]["per_pr_median_s"]
    result = {"machine": machine(), "model": "small" if args.small else "charlm demo defaults",
              "modes": summary, "overhead_s": overhead, "overhead_by_phase_s": by_phase,
              "overhead_pct": 100 * overhead / base,
              "total_difference_s": summary["signed"]["per_pr_median_s"] - base, "components_s": comp}
    path = write_json(args.out, result)
    print(f"validate per PR: unsigned {base:.3f}s, signed {summary['signed']['per_pr_median_s']:.3f}s; "
          f"overhead {overhead * 1000:.0f} ms ({result['overhead_pct']:.1f}%): "
          f"{({k: round(v * 1000) for k, v in by_phase.items()})} ms by phase, "
          f"components {({k: round(v * 1000, 1) for k, v in comp.items()})} ms")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
