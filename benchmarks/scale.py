"""Scale of the ledger: log and staleness on 1,000 and 10,000 versions; a queue of 200 PRs.

Usage:
    python benchmarks/scale.py                              # 1k and 10k versions, 200 PRs
    python benchmarks/scale.py --versions 100 --prs 5       # the smoke size the tests run

Long histories are built fast with `git fast-import` (version commits with
trailers, no training); the PR queue goes through the real `submit` and the
real validator on a tiny synthetic model, so the per-PR overhead is the
ledger's own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, timed, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions


def _git(*args, cwd, input=None):
    from woolf.git.repo import clean_env

    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env(),
                          input=input).stdout.decode().strip()


def build_history(root: Path, n: int):
    from woolf.ledger.ledger import Ledger

    led = Ledger.init(root / "long", CreateOptions(storage=str(root / "storage"), workload="synthetic",
                      overrides={"workload.params.n_params": "1000"}))
    v0 = led.head()
    stream = []
    for i in range(1, n + 1):
        msg = (f"woolf: version {i}\n\nWoolf-Version: {i}\nWoolf-Base-Version: {max(0, i - 2)}\n"
               f"Woolf-Staleness: {min(i - 1, 1)}\nWoolf-Attenuation: 0.5\nWoolf-Alpha: 1.0\n"
               f"Woolf-Contributor: p{i % 7}\nWoolf-Submission: sub{i}\n"
               f'Woolf-Metrics-After: {{"loss":{3.0 - i * 1e-5}}}\nWoolf-Weights-Sha256: {v0.weights_sha256}\n')
        data = msg.encode()
        stream.append(f"commit refs/heads/main\nmark :{i}\ncommitter woolf <w@woolf> {1_700_000_000 + i} +0000\n"
                      f"data {len(data)}\n".encode() + data + (f"from {v0.commit}\n" if i == 1 else "").encode()
                      + b"\n")
    t, _ = timed(_git, "fast-import", "--quiet", "--force", cwd=led.root, input=b"".join(stream))
    _git("reset", "-q", "--hard", "main", cwd=led.root)
    return Ledger.open(led.root), t


def history(n: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="woolf-scale-") as tmp:
        led, build = build_history(Path(tmp), n)
        head = led.head()
        full, versions = timed(led.log)
        assert len(versions) == n + 1
        top, _ = timed(led.log, 20)
        show, v = timed(led.show, n // 2)
        assert v.version == n // 2
        stale, count = timed(_git, "rev-list", "--count", "--first-parent", f"{led.show(0).commit}..main",
                             cwd=led.root)
        assert int(count) == head.version
        cli_full, _ = timed(subprocess.run, [sys.executable, "-m", "woolf", "log", "--json"], cwd=led.root,
                            capture_output=True, check=True)
        cli_top, _ = timed(subprocess.run, [sys.executable, "-m", "woolf", "log", "-n", "20", "--json"],
                           cwd=led.root, capture_output=True, check=True)
        cli_help, _ = timed(subprocess.run, [sys.executable, "-m", "woolf", "--version"], capture_output=True)
        return {"versions": n, "build_seconds": build, "log_all_seconds": full, "log_20_seconds": top,
                "show_middle_seconds": show, "staleness_from_v0_seconds": stale,
                "cli_log_all_json_seconds": cli_full, "cli_log_20_json_seconds": cli_top,
                "cli_startup_seconds": cli_help}


def queue(n_prs: int) -> dict:
    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit
    from woolf.storage.weights import save_atomic
    from woolf.validator import Validator
    from woolf.workloads.base import load_workload

    with tempfile.TemporaryDirectory(prefix="woolf-queue-") as tmp:
        root = Path(tmp)
        Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="synthetic",
                    overrides={"workload.params.n_params": "10000", "policy.min_improvement": "-1e9",
                               "merge.max_staleness": str(n_prs + 10),
                               # one synthetic step from the same base gives every PR nearly the same
                               # delta (cosine 0.995): the copy check would take them for copies
                               "scoring.copy_threshold": "1.0"}))
        _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
        for name in ("p", "v"):
            _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
        p = Ledger.open(root / "p")
        p.pull()
        wl = load_workload(p.config.workload)
        base = p.load_weights(p.head())
        sub_secs = 0.0
        for i in range(n_prs):
            trained, _ = wl.train(base, wl.default_data(f"p{i}", 0), 1)
            path = root / "trained.safetensors"
            save_atomic(trained, path)
            s, _ = timed(submit, p, weights=path, base_version=0, contributor=f"p{i % 10}")
            sub_secs += s
        v = Validator(Ledger.open(root / "v"), device="cpu")
        total, verdicts = timed(v.run)
        assert len(verdicts) == n_prs and all(x.accepted for x in verdicts)
        evals = sum(x.timings.get("evaluation", 0.0) for x in verdicts)
        parts: dict = {}
        for x in verdicts:
            for k, s in x.timings.items():
                parts[k] = parts.get(k, 0.0) + s
        return {"prs": n_prs, "submit_seconds_mean": sub_secs / n_prs, "validate_total_seconds": total,
                "prs_per_second": n_prs / total, "per_pr_overhead_seconds": (total - evals) / n_prs,
                "per_pr_breakdown_seconds": {k: round(s / n_prs, 4) for k, s in parts.items()},
                "max_staleness_seen": max(x.staleness for x in verdicts)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", default="1000,10000")
    ap.add_argument("--prs", type=int, default=200)
    ap.add_argument("--out", default="scale.json")
    args = ap.parse_args()
    out = {"machine": machine(), "history": [], "queue": None}
    for n in (int(x) for x in args.versions.split(",")):
        row = history(n)
        out["history"].append(row)
        print(row, flush=True)
    out["queue"] = queue(args.prs)
    print(out["queue"], flush=True)
    print(write_json(args.out, out))


if __name__ == "__main__":
    main()
