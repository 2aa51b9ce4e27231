"""Ledger operations against honest I/O floors, measured side by side in one run (benchmarks §1).

Usage:
    python benchmarks/ledger_ops.py                      # 100M float32 parameters
    python benchmarks/ledger_ops.py --sizes 1e6          # the smoke size the tests run
    python benchmarks/ledger_ops.py --repeat 2           # every operation and floor twice

For each size: submit (beyond training), validate (beyond the evaluations: the gate's two and
scoring's four, which run the model),
checkout (object cached, and fetched from storage), pull of a new version,
audit of one merged version, and `woolf submit --weights` as a whole command
(interpreter start and imports included). Each runs in its own process; its
floor runs in the same process right after it, measured the same way:

- every byte read once: each input file read into fresh memory;
- every new file written once, to a fresh file (never over memory the kernel
  just freed from a deleted file: nothing is deleted until the process ends);
- md5 of exactly the bytes the operation must hash (DVC addresses by md5;
  what comes from storage or a PR is untrusted and must be verified; a cached
  object verified before is not hashed again);
- imports outside both timers; everything else (DVC's repo, git) inside the
  operation's. The command row compares a whole `python -m woolf submit` with
  a whole `python -c` floor process (hashlib only) doing the same I/O, in a
  clone that pulled the base first (as `woolf train` leaves it).

Results go to benchmarks/results/ledger_ops.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, timed, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions


def peak_rss_mib() -> float:
    """This process's own high-water mark (VmHWM; ru_maxrss would keep the parent's across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    from common import peak_rss_mib as fallback

    return fallback()

OPS = ["submit", "validate", "checkout_cached", "checkout_storage", "pull", "audit", "submit_command"]
_FRESH = [0]


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def setup(root: Path, n_params: int) -> None:
    from woolf.ledger.ledger import Ledger

    Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="synthetic",
                overrides={"workload.params.n_params": str(n_params), "policy.min_improvement": "-1e9"}))
    _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
    for name in ("p", "v", "q", "r", "a", "c"):
        _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)


def read(path: Path) -> bytearray:
    buf = bytearray(os.path.getsize(path))
    with open(path, "rb", buffering=0) as fh:
        fh.readinto(buf)
    return buf


def write_fresh(buf, scratch: Path) -> None:
    _FRESH[0] += 1
    with open(scratch / f"floor-{os.getpid()}-{_FRESH[0]}", "wb", buffering=0) as fh:
        fh.write(buf)


def md5(buf) -> None:
    hashlib.md5(buf, usedforsecurity=False).hexdigest()


def floor(reads: list[Path], writes: int, hashes: int, scratch: Path, copy: Path | None = None) -> dict:
    """Read every input once, write ``writes`` new files of the first input's size, md5 ``hashes`` inputs.

    ``copy``: the new file may be a kernel copy of this file (checkout, pull), whichever is cheaper.
    """
    os.sync()  # as before the operation: nobody pays for the writeback of an earlier step's files
    t = {}
    t0 = time.perf_counter()
    bufs = [read(p) for p in reads]
    t["read"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(writes):
        write_fresh(bufs[0], scratch)
    t["write"] = time.perf_counter() - t0
    if copy is not None:
        _FRESH[0] += 1
        t0 = time.perf_counter()
        shutil.copyfile(copy, scratch / f"copy-{os.getpid()}-{_FRESH[0]}")
        t["write"] = min(t["write"], time.perf_counter() - t0) if writes else time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(hashes):
        md5(bufs[min(i, len(bufs) - 1)])
    t["md5"] = time.perf_counter() - t0
    t["total"] = sum(t.values())
    return t


def child(op: str, root: Path, repeat: int) -> dict:
    from woolf.ledger.ledger import Ledger

    scratch = root / "scratch"
    scratch.mkdir(exist_ok=True)
    out: dict = {"op": op, "runs": []}
    rss0 = peak_rss_mib()
    copy = None
    if op == "submit":
        from safetensors.torch import load_file, save_file

        from woolf.participant import submit
        from woolf.workloads.base import load_workload

        p = Ledger.open(root / "p")
        p.pull()
        base_path = p.weights_path(p.head())
        wl = load_workload(p.config.workload)
        trained, _ = wl.train(load_file(base_path), wl.default_data("p", 0), 1)
        tpath = root / "trained.safetensors"
        save_file(trained, tpath)
        del trained
        rss0 = peak_rss_mib()
        for _ in range(repeat):  # each a new PR from the same trained file
            os.sync()
            secs, result = timed(submit, p, weights=tpath, base_version=0, contributor="p")
            if not out["runs"] or secs < min(out["runs"]):
                out.update(breakdown=result["timings"])
            out["runs"].append(secs)
        reads, writes, hashes, size_of = [base_path, tpath], 1, 1, tpath
        out["floor_is"] = "read base + trained, write the delta, md5 of the delta"
    elif op == "validate":
        from woolf.forges.base import PullRequest
        from woolf.validator import Validator

        v = Validator(Ledger.open(root / "v"), device="cpu")
        first = min(v.forge.list(state="open"), key=PullRequest.queue_key).id  # submit ran --repeat times
        os.sync()
        secs, verdicts = timed(v.run, [first])
        [verdict] = verdicts
        assert verdict.accepted, verdict.reason
        t = verdict.timings
        out["runs"].append(secs - t.get("evaluation", 0.0) - t.get("scoring", 0.0))  # both run the model
        out.update(breakdown=t, with_eval_seconds=secs)
        led = v.ledger
        cur = led.weights_path(led.show(0))
        size_of = cur
        reads, writes, hashes = [cur, led.store.cache_path(json.loads(led.git.show_bytes(
            f"{led.show(1).commit}^2:submissions/{verdict.id}/submission.json"))["delta"]["md5"])], 1, 3
        out["floor_is"] = ("read current + delta, write the candidate, md5 of the candidate, the delta and "
                           "current (a cold validator fetches current from storage too)")
    elif op in ("checkout_cached", "checkout_storage"):
        q = Ledger.open(root / "q")
        q.fetch()
        q.main_ref = "refs/remotes/origin/main"
        ptr = q.pointer(q.show(1).commit)
        obj = q.store.cache_path(ptr.md5)
        if op == "checkout_cached":
            q.store.fetch_object(ptr)
            q.weights_path(q.show(1))
        for i in range(repeat):
            if op == "checkout_storage":
                obj.unlink(missing_ok=True)
                (q.store.verified._record_path(obj)).unlink(missing_ok=True)
            os.sync()
            out["runs"].append(timed(q.checkout, 1, scratch / f"out{i}.safetensors")[0])
        src = root / "storage" / "files" / "md5" / ptr.md5[:2] / ptr.md5[2:]
        cached = op == "checkout_cached"  # a verified cached object needs only the copy
        reads, writes, hashes, size_of, copy = [] if cached else [src], 0 if cached else 1, int(not cached), src, src
        out["floor_is"] = ("copy the object" if cached else
                           "read the object, md5 of it, write the output (or a kernel copy, if cheaper)")
    elif op == "pull":
        q = Ledger.open(root / "r")
        q.materialize(q.head())  # version 0 in place, as a participant would have it
        os.sync()
        secs, head = timed(q.pull)
        assert head.version == 1
        out["runs"].append(secs)
        src = q.store.cache_path(q.pointer(head.commit).md5)
        reads, writes, hashes, size_of, copy = [src], 1, 1, src, src
        out["floor_is"] = "read the object, md5 of it, write the workspace file (or a kernel copy, if cheaper)"
    elif op == "audit":
        from woolf.audit.recompute import audit

        a = Ledger.open(root / "a")
        a.pull()
        os.sync()
        secs, report = timed(audit, a)
        assert report.ok, report.problems
        out["runs"].append(secs)
        v0 = a.weights_path(a.show(0))
        reads, writes, hashes, size_of = [v0, v0], 0, 1, v0
        out["floor_is"] = "read the parent and the delta, md5 of the recomputed version (no file written)"
    elif op == "submit_command":
        c = root / "c"
        cl = Ledger.open(c)
        cl.pull()
        v0 = cl.weights_path(cl.show(0))  # as after `woolf train` from version 0: the base cached, verified
        tpath = root / "trained.safetensors"
        code = ("import hashlib,os,sys\nb=[open(p,'rb').read() for p in sys.argv[1:3]]\n"
                "open(sys.argv[3],'wb').write(b[0])\nhashlib.md5(b[0]).hexdigest()\n")
        floors = []
        for i in range(max(3, repeat)):  # command and floor interleaved, the best of each compared
            os.sync()
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "woolf", "-C", str(c), "submit", "--weights", str(tpath),
                                   "--base", "0", "--contributor", "c", "--json"], capture_output=True, text=True,
                                  cwd=root)  # not the caller's directory: `-m` would import woolf from there
            out["runs"].append(time.perf_counter() - t0)
            if proc.returncode:
                raise SystemExit(proc.stderr[-2000:])
            os.sync()
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code, str(v0), str(tpath), str(scratch / f"cmdfloor{i}")], check=True)
            floors.append(time.perf_counter() - t0)
        out["floor"] = {"total": min(floors)}
        out["floor_is"] = "a python process that reads base + trained, writes one file, md5 of it"
        out["tensor_bytes"] = tpath.stat().st_size
        out["seconds"] = min(out["runs"])
        out["ratio"] = out["seconds"] / out["floor"]["total"]
        out.update(peak_rss_mib=None, rss_before_mib=None)
        return out
    out["peak_rss_mib"], out["rss_before_mib"] = peak_rss_mib(), rss0
    # as many floors as runs of the operation, the best of each compared: equal chances under noise
    floors = [floor(reads, writes, hashes, scratch, copy) for _ in range(len(out["runs"]))]
    out["floor"] = min(floors, key=lambda f: f["total"])
    out["tensor_bytes"] = size_of.stat().st_size
    out["seconds"] = min(out["runs"])
    out["ratio"] = out["seconds"] / out["floor"]["total"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100e6")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--child")
    ap.add_argument("--root", type=Path)
    ap.add_argument("--out", default="ledger_ops.json")
    ap.add_argument("--ops", default=",".join(OPS), help="a subset, in order (submit_command needs submit)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.root, args.repeat)))
        return
    results = {"machine": machine(), "load_average": os.getloadavg(), "sizes": {}}
    for size in (int(float(s)) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="woolf-bench-") as tmp:
            root = Path(tmp)
            setup_s, _ = timed(setup, root, size)
            rows = []
            for op in args.ops.split(","):
                proc = subprocess.run([sys.executable, __file__, "--child", op, "--root", str(root),
                                       "--repeat", str(args.repeat)], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"{op} failed:\n{proc.stderr[-3000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                rows.append(row)
                f = row["floor"]
                parts = " ".join(f"{k} {v:.3f}" for k, v in f.items() if k != "total")
                peak = f"peak {row['peak_rss_mib'] - row['rss_before_mib']:6.0f} MiB over start" \
                    if row["peak_rss_mib"] else ""
                print(f"{size:>11,} {op:<17} {row['seconds']:7.3f}s  floor {f['total']:6.3f}s ({parts})  "
                      f"x{row['ratio']:5.2f}  {peak}", flush=True)
                if "breakdown" in row:
                    print(" " * 30 + ", ".join(f"{k} {v:.2f}" for k, v in
                                               sorted(row["breakdown"].items(), key=lambda kv: -kv[1])), flush=True)
            results["sizes"][str(size)] = {"init_seconds": setup_s, "ops": rows}
    print(write_json(args.out, results))


if __name__ == "__main__":
    main()
