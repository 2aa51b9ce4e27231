"""What a flood of junk PRs costs a validator: N PR heads tried, then one validation pass.

Usage:
    python benchmarks/flood_cost.py                      # N = 60 and 150, the demo's charlm
    python benchmarks/flood_cost.py --n 10000 --small    # issue 25's target: the hub bounds the flood
    python benchmarks/flood_cost.py --n 2000 --unhooked --small   # past the hook: the pass is linear
    python benchmarks/flood_cost.py --n 2 --small        # the smoke size the tests run

A signed ledger with a hub made by `woolf hub init` (its hook checks every
push). A participant tries N PR heads under fresh keyless names, all pointing at one commit
without a submission, in pushes of PUSH_MAX_NEW_PRS (the hook's limit) until the hub's bucket
for keyless PRs (OPEN_KEYLESS_MAX) refuses more; then alice, a listed key, opens one signed PR. Then a fresh clone runs
`woolf pr list` and a fresh validator clone runs one `woolf validate --all`
pass (real processes), which must reject every one of them with a signed
verdict. Reported: seconds per junk PR for each. Names cost nothing without
contributor keys, so this cost is linear in N (docs/protocol.md, floods);
RESULTS.md §11. Results go to benchmarks/results/flood_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions

SMALL = {"workload.params.d_model": "32", "workload.params.n_layer": "1", "workload.params.context": "32",
         "workload.params.benchmark_bytes": "4096"}


def build(root: Path, small: bool) -> None:
    from woolf.git.keys import configure, create_key
    from woolf.git.repo import Git, clean_env
    from woolf.hub.create import init_hub
    from woolf.ledger.ledger import Ledger
    from woolf.protocol.signers import signer_line

    create_key(root / "keys" / "maintainer", "maintainer")
    _, vpub = create_key(root / "keys" / "v", "v")
    _, apub = create_key(root / "keys" / "alice", "alice")
    Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), overrides=SMALL if small else {},
                signing_key=root / "keys" / "maintainer", signer="maintainer",
                extra_signers=[signer_line("v", vpub, ["validator"]), signer_line("alice", apub)]))
    init_hub(root / "hub.git", root / "work")
    for name in ("mallory", "obs", "v", "alice"):
        subprocess.run(["git", "clone", "-q", str(root / "hub.git"), str(root / name)], check=True, env=clean_env())
    configure(Git(root / "v"), root / "keys" / "v")
    configure(Git(root / "alice"), root / "keys" / "alice")


CPU: list[float] = []  # CPU seconds (user + system, with git and ssh-keygen children) of each woolf() call


def woolf(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "woolf", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=3600, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"woolf {' '.join(args)} failed: {proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return time.perf_counter() - t0, proc


UNHOOKED = "git -c core.hooksPath=/dev/null -c receive.fsckObjects=false receive-pack"


def one(n: int, small: bool, unhooked: bool = False) -> dict:
    """The attacker tries N junk PRs in pushes of PUSH_MAX_NEW_PRS (``unhooked``: all in one push past
    the hook, as a forge without it would take them), then alice (a listed key) opens one signed PR."""
    from woolf.git.repo import Git
    from woolf.protocol import layout
    from woolf.protocol.rules.flood import PUSH_MAX_NEW_PRS

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, small)
        git = Git(root / "mallory")
        head = git.rev_parse("refs/remotes/origin/main")
        junk = git.out("commit-tree", f"{head}^{{tree}}", "-p", head, input=b"junk\n")
        refs = [f"{junk}:{layout.PR_PREFIX}/20261130T000000{i % 1000:03d}Z-m{i}-{os.urandom(4).hex()}/head"
                for i in range(n)]
        t0 = time.perf_counter()
        landed = 0
        step = n if unhooked else PUSH_MAX_NEW_PRS
        for i in range(0, n, step):
            extra = ["--receive-pack", UNHOOKED] if unhooked else []
            proc = git.run("push", "-q", *extra, "origin", *refs[i:i + step], check=False)
            if proc.returncode == 0:
                landed += len(refs[i:i + step])
            elif "keyless" in proc.stderr.decode() or "without a key" in proc.stderr.decode():
                break  # the hub's bucket for keyless PRs is full: every further push is refused alike
        pushed = time.perf_counter() - t0
        alice = Git(root / "alice")
        top = alice.rev_parse("refs/remotes/origin/main")
        signed = alice.out("commit-tree", f"{top}^{{tree}}", "-p", top, "-S", input=b"alice's\n")
        honest = f"20261130T235959000Z-alice-{os.urandom(4).hex()}"
        alice.run("push", "-q", "origin", f"{signed}:{layout.PR_PREFIX}/{honest}/head")
        listed, _ = woolf("pr", "list", "--json", cwd=root / "obs")
        validated, proc = woolf("validate", "--all", "--json", "--device", "cpu", cwd=root / "v")
        verdicts = json.loads(proc.stdout or "[]")
        rejected = sum(1 for v in verdicts if not v.get("accepted"))
        order = [v.get("id") for v in verdicts]
        position = order.index(honest) if honest in order else None
    row = {"n": n, "unhooked": unhooked, "landed": landed, "push_s": pushed, "pr_list_s": listed,
           "validate_s": validated, "rejected": rejected, "signed_pr_position": position,
           "pr_list_cpu_s": CPU[-2], "validate_cpu_s": CPU[-1], "load_avg": os.getloadavg()[0],
           "validate_per_pr_s": validated / max(landed, 1), "pr_list_per_pr_s": listed / max(landed, 1)}
    print(f"N={n:5d} {'unhooked' if unhooked else 'hooked  '} landed {landed:5d}  push {pushed:6.2f} s   "
          f"pr list {listed:6.2f} s   validate --all {validated:7.2f} s ({validated / max(landed, 1):.3f} s/PR), "
          f"{rejected} rejected, alice's signed PR served #{position}; CPU: pr list {CPU[-2]:.2f} s, "
          f"validate {CPU[-1]:.2f} s; load average {os.getloadavg()[0]:.1f}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="60,150", help="comma-separated numbers of junk PRs")
    ap.add_argument("--small", action="store_true", help="a tiny charlm (smoke runs)")
    ap.add_argument("--unhooked", action="store_true", help="push past the hook (a forge without one)")
    ap.add_argument("--out", default="flood_cost.json")
    args = ap.parse_args()
    rows = [one(int(n), args.small, args.unhooked) for n in args.n.split(",")]
    write_json(args.out, {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
