"""Ledger operations against the I/O floor measured in the same run (issue: benchmarks §1).

Usage:
    python benchmarks/ledger_ops.py                      # 10M and 100M float32 parameters
    python benchmarks/ledger_ops.py --sizes 1e6          # the smoke size the tests run

For each size: submit (beyond training), validate (beyond the two evaluations),
checkout (object cached, and fetched from storage), pull of a new version, and
audit of one merged version. Each runs in its own process, so its peak RSS is
its own; beside it, in the same process, the floor: raw safetensors reads and
writes (or a plain copy) of the same bytes, and md5 of them (DVC addresses by
md5). Results go to benchmarks/results/ledger_ops.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, peak_rss_mib, timed, write_json  # noqa: E402

OPS = ["submit", "validate", "checkout_cached", "checkout_storage", "pull", "audit"]


def _git(*args, cwd):
    from woolf.storage.git import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def setup(root: Path, n_params: int) -> None:
    from woolf.ledger import Ledger

    Ledger.init(root / "work", storage=str(root / "storage"), workload="synthetic",
                overrides={"workload.params.n_params": str(n_params), "policy.min_improvement": "-1e9"})
    _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
    for name in ("p", "v", "q", "r", "a"):
        _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)


def md5_of(path: Path) -> None:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while b := fh.read(16 << 20):
            h.update(b)


def child(op: str, root: Path) -> dict:
    import torch
    from safetensors.torch import load_file, save_file

    from woolf.ledger import Ledger

    torch.set_num_threads(1)
    rss0 = peak_rss_mib()
    scratch = root / "scratch"
    scratch.mkdir(exist_ok=True)
    out: dict = {"op": op}
    if op == "submit":
        from woolf.contribute import submit
        from woolf.workloads.base import load_workload

        p = Ledger.open(root / "p")
        p.pull()
        base_path = p.weights_path(p.head())
        wl = load_workload(p.config.workload)
        trained, _ = wl.train(load_file(base_path), wl.default_data("p", 0), 1)
        tpath = scratch / "trained.safetensors"
        save_file(trained, tpath)
        del trained
        rss0 = peak_rss_mib()
        secs, result = timed(submit, p, weights=tpath, base_version=0, contributor="p")
        out.update(seconds=secs, breakdown=result["timings"], peak_rss_mib=peak_rss_mib(), rss_before_mib=rss0)
        dpath = p.store.cache_path(json.loads(p.git.show_bytes(
            f"{result['commit']}:submissions/{result['id']}/submission.json"))["delta"]["md5"])

        def floor():
            a, b = load_file(base_path), load_file(tpath)
            save_file(b, scratch / "floor.safetensors")
            del a, b
        out["floor_seconds"] = min(timed(floor)[0] for _ in range(2))
        out["md5_seconds"] = timed(md5_of, dpath)[0] + timed(md5_of, tpath)[0]
        out["tensor_bytes"] = tpath.stat().st_size
    elif op == "validate":
        from woolf.validator import Validator

        v = Validator(Ledger.open(root / "v"), device="cpu")
        secs, verdicts = timed(v.run)
        [verdict] = verdicts
        assert verdict.accepted, verdict.reason
        t = verdict.timings
        out.update(seconds=secs, beyond_eval_seconds=secs - t.get("evaluation", 0.0), breakdown=t,
                   peak_rss_mib=peak_rss_mib(), rss_before_mib=rss0)
        led = v.ledger
        cur = led.weights_path(led.show(0))
        new = led.weights_path(led.show(1))

        def floor():
            a = load_file(cur)
            b = load_file(new)  # same size as the delta
            save_file(a, scratch / "floor.safetensors")
            del a, b
        out["floor_seconds"] = min(timed(floor)[0] for _ in range(2))
        out["md5_seconds"] = 3 * timed(md5_of, cur)[0]
        out["tensor_bytes"] = cur.stat().st_size
    elif op in ("checkout_cached", "checkout_storage"):
        q = Ledger.open(root / "q")
        q.fetch()
        q.main_ref = "refs/remotes/origin/main"
        ptr = q.pointer(q.show(1).commit)
        obj = q.store.cache_path(ptr.md5)
        if op == "checkout_storage":
            obj.unlink(missing_ok=True)
        else:
            q.store.fetch_object(ptr)
        secs, _ = timed(q.checkout, 1, scratch / "out.safetensors")
        out["second_run_seconds"] = timed(q.checkout, 1, scratch / "out2.safetensors")[0]
        src = obj if op == "checkout_cached" else root / "storage" / "files" / "md5" / ptr.md5[:2] / ptr.md5[2:]
        out.update(seconds=secs, peak_rss_mib=peak_rss_mib(), rss_before_mib=rss0)
        out["floor_seconds"] = min(timed(shutil.copyfile, src, scratch / "cp.safetensors")[0] for _ in range(2))
        out["md5_seconds"] = timed(md5_of, src)[0]
        out["tensor_bytes"] = src.stat().st_size
    elif op == "pull":
        q = Ledger.open(root / "r")
        q.materialize(q.head())  # version 0 in place, as a participant would have it
        secs, head = timed(q.pull)
        assert head.version == 1
        from woolf import layout

        src = q.store.cache_path(q.pointer(head.commit).md5)
        out.update(seconds=secs, peak_rss_mib=peak_rss_mib(), rss_before_mib=rss0)
        out["floor_seconds"] = min(timed(shutil.copyfile, src, scratch / "cp.safetensors")[0] for _ in range(2)) * 2
        out["md5_seconds"] = timed(md5_of, q.root / layout.WEIGHTS)[0]
        out["tensor_bytes"] = src.stat().st_size
        out["note"] = "floor = two copies (storage -> cache -> workspace); the old weights were materialised before"
    elif op == "audit":
        from woolf.audit import audit

        a = Ledger.open(root / "a")
        a.pull()
        secs, report = timed(audit, a)
        assert report.ok, report.problems
        out.update(seconds=secs, peak_rss_mib=peak_rss_mib(), rss_before_mib=rss0)
        v0 = a.weights_path(a.show(0))

        def floor():
            x, y = load_file(v0), load_file(v0)
            save_file(x, scratch / "floor.safetensors")
            del x, y
        out["floor_seconds"] = min(timed(floor)[0] for _ in range(2))
        out["md5_seconds"] = 3 * timed(md5_of, v0)[0]
        out["tensor_bytes"] = v0.stat().st_size
    spent = out.get("beyond_eval_seconds", out["seconds"])
    out["ratio_to_raw_io"] = spent / out["floor_seconds"]
    out["ratio_to_floor"] = spent / (out["floor_seconds"] + out["md5_seconds"])  # floor = raw I/O + md5
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10e6,100e6")
    ap.add_argument("--child")
    ap.add_argument("--root", type=Path)
    ap.add_argument("--out", default="ledger_ops.json")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.root)))
        return
    results = {"machine": machine(), "sizes": {}}
    for size in (int(float(s)) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="woolf-bench-") as tmp:
            root = Path(tmp)
            setup_s, _ = timed(setup, root, size)
            rows = []
            for op in OPS:
                proc = subprocess.run([sys.executable, __file__, "--child", op, "--root", str(root)],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"{op} failed:\n{proc.stderr[-3000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"{size:>11,} {op:<17} {row.get('beyond_eval_seconds', row['seconds']):7.3f}s "
                      f"raw I/O {row['floor_seconds']:7.3f}s  md5 {row['md5_seconds']:6.3f}s  "
                      f"x{row['ratio_to_floor']:5.2f} of I/O+md5 (x{row['ratio_to_raw_io']:5.2f} of raw I/O)  "
                      f"peak {row['peak_rss_mib']:7.0f} MiB", flush=True)
            results["sizes"][str(size)] = {"init_seconds": setup_s, "ops": rows}
    print(write_json(args.out, results))


if __name__ == "__main__":
    main()
