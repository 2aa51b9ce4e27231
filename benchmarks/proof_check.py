"""Proof of training, measured (benchmarks/RESULTS.md §21): bit-exactness, detection, verifier cost, honest false
rejections, bytes per PR.

Usage:
    python benchmarks/proof_check.py                     # every part: results/proof_check.json
    python benchmarks/proof_check.py --parts detection   # one part (exactness, detection, cost, honest, bytes)
    python benchmarks/proof_check.py --smoke             # seconds: the tests' path

Parts:
- exactness: charlm runs committed with a link every k steps; every segment replayed from its kept state in
  this process (the same threads), in another process (the same threads), and at another thread count:
  bit for bit (its end digests to its link) or how far (relative to the segment's movement);
- detection: cheats built as demo/forgery.py builds them (no ledger): the natural lazy one (trains the
  first 1 - s of its steps, makes the rest up) and one that hides its skip in a random middle segment,
  for s = 2%, 10%, 50%; each audited as a validator audits (the final segment and proof.segments others
  drawn from fresh material); the share caught per audited PR, against r/(m - 1) for the hidden one;
- cost: the demo model's training with and without its recorder, and an audit's replay (the start check
  and the audited segments) against the training: the verifier's share of the producer's compute;
- honest: honest PRs through `woolf train`/`submit`/`prove` and a Validator at validators.retrain_rate 1,
  by route (dense, top-k, LoRA, followed main, two processes with dropout): false rejections;
- bytes: a dense PR that is not drawn (its delta and its submission.json) and a drawn PR's answer.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

SMALL = {"d_model": 32, "n_layer": 1, "context": 32, "batch_size": 8, "benchmark_bytes": 4096, "shard_files": 2}
DEMO = {"d_model": 64, "n_layer": 2, "context": 64, "batch_size": 16}  # charlm's defaults: the quick demo's model
SHARES = (0.02, 0.10, 0.50)


def _warm(params: dict):
    from woolf.workloads.charlm import CharLM

    wl = CharLM(**params)
    warm, _ = wl.train(wl.genesis(0), wl.default_data("warm", 0), 40, seed=99)  # a trained model, not genesis
    return wl, warm


# -- exactness ---------------------------------------------------------------------------------------------

_REPLAY_CODE = """
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file
from woolf.workloads.charlm import CharLM
from woolf.workloads.proof import Replay
from woolf.protocol.proof import state_digest
d = Path(sys.argv[1]); spec = json.loads((d / "spec.json").read_text())
torch.set_num_threads(spec["threads"])
wl = CharLM(**spec["params"]); warm = load_file(d / "warm.safetensors")
out = []
for i in range(len(spec["at"]) - 1):
    rep = Replay(load_file(d / f"link-{i:04d}.safetensors"), spec["at"][i], spec["at"][i + 1])
    wl.train(warm, wl.default_data(spec["owner"], 1), spec["steps"], seed=spec["seed"], proof=rep)
    out.append(state_digest(rep.end) == spec["links"][i + 1][0])
print(json.dumps(out))
"""


def exactness(params: dict, seeds: int, steps: int, every: int, threads: int) -> dict:
    import torch
    from safetensors.torch import load_file

    from woolf.core.chain import relative_distance
    from woolf.protocol.proof import state_digest
    from woolf.storage.weights import save_atomic
    from woolf.workloads.proof import Recorder, Replay

    wl, warm = _warm(params)
    rows = []
    for s in range(seeds):
        data = wl.default_data(f"p{s}", 1)
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            torch.set_num_threads(threads)
            rec = Recorder(every, keep=d, keep_bytes=1 << 40)
            wl.train(warm, data, steps, seed=s, proof=rec)
            for where, n in (("same process, same threads", threads), ("same process, 1 thread", 1)):
                torch.set_num_threads(n)
                for i in range(len(rec.at) - 1):
                    start, end = load_file(d / rec.kept[i]), load_file(d / rec.kept[i + 1])
                    rep = Replay(dict(start), rec.at[i], rec.at[i + 1], keep_end=True)
                    wl.train(warm, data, steps, seed=s, proof=rep)
                    keys = [k for k in end if k.startswith("params/")]
                    exact = state_digest(rep.end) == rec.links[i + 1][0]
                    dist = 0.0 if exact else relative_distance({k: rep.end_state[k] for k in keys},
                                                               {k: end[k] for k in keys}, {k: start[k] for k in keys})
                    rows.append({"seed": s, "segment": i, "replay": where, "exact": exact, "distance": dist})
            torch.set_num_threads(threads)
            save_atomic(warm, d / "warm.safetensors")
            (d / "spec.json").write_text(json.dumps({"threads": threads, "params": params, "at": rec.at,
                                                     "links": rec.links, "steps": steps, "seed": s,
                                                     "owner": f"p{s}"}))
            got = subprocess.run([sys.executable, "-c", _REPLAY_CODE, str(d)], capture_output=True, text=True,
                                 timeout=600)
            for i, ok in enumerate(json.loads(got.stdout or "[]")):
                rows.append({"seed": s, "segment": i, "replay": "another process, same threads", "exact": ok,
                             "distance": 0.0 if ok else None})
    torch.set_num_threads(1)
    summary = {}
    for r in rows:
        k = summary.setdefault(r["replay"], {"segments": 0, "exact": 0, "max_distance": 0.0})
        k["segments"] += 1
        k["exact"] += r["exact"]
        k["max_distance"] = max(k["max_distance"], r["distance"] or 0.0)
    return {"params": params, "steps": steps, "every": every, "threads": threads, "summary": summary, "rows": rows}


# -- detection ---------------------------------------------------------------------------------------------

def _audited(wl, warm, data, rec, steps: int, seed: int, extra: int) -> tuple[bool, list[int]]:
    """Whether an audit of ``rec``'s chain (the final segment and ``extra`` drawn others) finds a mismatch."""
    from safetensors.torch import load_file

    from woolf.protocol.proof import draw_segments, state_digest
    from woolf.workloads.proof import Replay

    segments = draw_segments(secrets.token_bytes(32), len(rec.at) - 1, extra)
    for i in segments:
        rep = Replay(load_file(rec.keep / rec.kept[i]), rec.at[i], rec.at[i + 1])
        wl.train(warm, data, steps, seed=seed, proof=rep)
        if state_digest(rep.end) != rec.links[i + 1][0]:
            return True, segments
    return False, segments


def detection(params: dict, steps: int, trials: int, extra: int, every: int) -> dict:
    from woolf.demo.forgery import forge_chain
    from woolf.protocol.proof import link_steps

    wl, warm = _warm(params)
    m = len(link_steps(steps, every)) - 1
    rows = []
    for how in ("natural", "hidden"):
        for share in SHARES:
            caught = 0
            for t in range(trials):
                data = wl.default_data(f"lazy{t}", 1)
                with tempfile.TemporaryDirectory() as tmp:
                    rec, _ = forge_chain(wl, warm, data, steps, 1000 + t, every, Path(tmp), 1 - share,
                                         hide=how == "hidden")
                    hit, _ = _audited(wl, warm, data, rec, steps, 1000 + t, extra)
                    caught += hit
            expected = 1.0 if how == "natural" else min(1.0, extra / max(1, m - 1))
            rows.append({"cheat": how, "skipped": share, "trials": trials, "caught": caught,
                         "caught_per_audited_pr": caught / trials, "expected_per_audited_pr": expected})
    return {"params": params, "steps": steps, "every": every, "segments": m, "extra_audited": extra,
            "rows": rows, "within": _within(rows)}


def _within(rows: list[dict]) -> list[dict]:
    """The chance a cheat of each kind is caught within n of its PRs, at audit rate p: 1 - (1 - p q)^n."""
    out = []
    for r in rows:
        q = r["caught_per_audited_pr"]
        for p in (0.05, 0.10, 0.25, 1.0):
            out.append({"cheat": r["cheat"], "skipped": r["skipped"], "rate": p,
                        **{f"n={n}": 1 - (1 - p * q) ** n for n in (1, 10, 40, 100)},
                        "prs_for_95pct": next((n for n in range(1, 100_000) if 1 - (1 - p * q) ** n >= 0.95), None)})
    return out


# -- cost ----------------------------------------------------------------------------------------------------

def cost(params: dict, steps: int, every: int, extra: int, seeds: int) -> dict:
    import torch
    from safetensors.torch import load_file

    from woolf.protocol.proof import draw_segments
    from woolf.workloads.proof import Recorder, Replay, StartCheck, Stop

    wl, warm = _warm(params)
    rows = []
    for s in range(seeds):
        data = wl.default_data(f"p{s}", 1)
        torch.manual_seed(s)
        t0 = time.perf_counter()
        wl.train(warm, data, steps, seed=s)
        plain = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            rec = Recorder(every, keep=Path(tmp), keep_bytes=1 << 40)
            t0 = time.perf_counter()
            wl.train(warm, data, steps, seed=s, proof=rec)
            recorded = time.perf_counter() - t0
            segments = draw_segments(secrets.token_bytes(32), len(rec.at) - 1, extra)
            t0 = time.perf_counter()
            try:
                wl.train(warm, data, steps, seed=s, proof=StartCheck())
            except Stop:
                pass
            for i in segments:
                wl.train(warm, data, steps, seed=s, proof=Replay(load_file(Path(tmp) / rec.kept[i]), rec.at[i],
                                                                  rec.at[i + 1]))
            audit = time.perf_counter() - t0
        replayed = sum(rec.at[i + 1] - rec.at[i] for i in segments)
        rows.append({"seed": s, "train_seconds": plain, "train_with_recorder_seconds": recorded,
                     "audit_seconds": audit, "replayed_steps": replayed, "steps": steps})
    tr = sum(r["train_seconds"] for r in rows)
    return {"params": params, "steps": steps, "every": every, "extra_audited": extra, "rows": rows,
            "recording_overhead": sum(r["train_with_recorder_seconds"] for r in rows) / tr - 1,
            "audit_over_training": sum(r["audit_seconds"] for r in rows) / tr,
            "steps_share": sum(r["replayed_steps"] for r in rows) / sum(r["steps"] for r in rows)}


# -- honest PRs through the ledger ---------------------------------------------------------------------------

def _network(root: Path, overrides: dict, workload: str = "charlm", weights: Path | None = None) -> Path:
    from woolf.hub.create import init_hub
    from woolf.ledger.create import CreateOptions
    from woolf.ledger.ledger import Ledger

    base = {**({f"workload.params.{k}": str(v) for k, v in SMALL.items()} if workload == "charlm" else {}),
            "workload.steps": "20", "policy.min_improvement": "-10", "validators.retrain_rate": "1",
            "scoring.copy_threshold": "0.9999", "scoring.min_assigned": "-10"}
    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload=workload,
                                                    weights=weights, overrides={**base, **overrides}))
    init_hub(root / "hub.git", work.root)
    subprocess.run(["git", "remote", "add", "origin", str(root / "hub.git")], cwd=work.root, check=True)
    return root / "hub.git"


def _clone(root: Path, hub: Path, name: str):
    from woolf.git.repo import clean_env
    from woolf.ledger.ledger import Ledger

    env = clean_env({"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": f"{name}@x", "GIT_COMMITTER_NAME": name,
                     "GIT_COMMITTER_EMAIL": f"{name}@x"})
    subprocess.run(["git", "clone", "-q", str(hub), str(root / name)], check=True, env=env)
    subprocess.run(["git", "config", "user.name", name], cwd=root / name, check=True)
    subprocess.run(["git", "config", "user.email", f"{name}@x"], cwd=root / name, check=True)
    return Ledger.open(root / name)


def _audit(v, *people) -> list:
    from woolf.participant.prove import prove_once

    first = v.run()
    for p in people:
        prove_once(p)
    return first + v.run()


def _row(route: str, verdict, trained: dict | None, led, pr: dict) -> dict:
    r = verdict.retrain or {}
    meta = led.git.show_bytes(f"refs/woolf/pr/{pr['id']}/head:submissions/{pr['id']}/submission.json") or b""
    recipe = (json.loads(meta) if meta else {}).get("recipe") or {}
    return {"route": route, "state": verdict.state, "reason": verdict.reason[:160], "retrain": r.get("retrain"),
            "follow_points": len((recipe.get("proof") or {}).get("follow", [])), "nproc": recipe.get("nproc"),
            "audit_seconds": r.get("seconds"), "replayed_steps": r.get("steps"),
            "train_seconds": (trained or {}).get("training", {}).get("seconds"),
            "delta_bytes": pr.get("delta_size"), "submission_json_bytes": len(meta)}


def _route(route: str, n: int, steps: int, overrides: dict, lora: str | None = None, follow: bool = False) -> list:
    import torch

    from woolf.participant import SubmitOptions, TrainOptions, submit, train
    from woolf.validator import Validator

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hub = _network(root, overrides)
        people = [_clone(root, hub, f"p{i}") for i in range(4)]
        v = Validator(_clone(root, hub, "val"), device="cpu", name="v1")
        for i in range(n):
            who, name = people[i % 4], f"p{i % 4}"
            helper = people[(i + 1) % 4]
            landed: list = []
            if follow:  # a PR lands while this one trains: it follows main
                trained_h = train(helper, TrainOptions(steps=steps, contributor=f"p{(i + 1) % 4}", seed=50_000 + i,
                                                       device="cpu"))
                pr_h = submit(helper, SubmitOptions(contributor=f"p{(i + 1) % 4}"))

                def meanwhile(step, total, loss, helper=helper, pr_h=pr_h, trained_h=trained_h, landed=landed):
                    if step == 3 and not landed:
                        with torch.random.fork_rng():
                            landed.extend(_row("dense (landed meanwhile)", x, trained_h, v.ledger, pr_h)
                                          for x in _audit(v, helper))
            trained = train(who, TrainOptions(steps=steps, contributor=name, seed=1000 + i, device="cpu", lora=lora,
                                              progress=meanwhile if follow else None))
            pr = submit(who, SubmitOptions(contributor=name))
            rows += landed
            rows += [_row(route, x, trained, v.ledger, pr) for x in _audit(v, who)]
    return rows


def _two_process(n: int) -> list:
    from woolf.participant import SubmitOptions, submit
    from woolf.validator import Validator

    spec_path = Path(__file__).parents[1] / "examples" / "make_tiny_model.py"
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_tiny_model", spec_path)
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = tiny.make_tiny_model(root / "gpt2")  # GPT-2's default dropout 0.1
        hub = _network(root, {"workload.steps": "4", "workload.params.context": "32",
                              "workload.params.batch_size": "4", "workload.params.benchmark_bytes": "3000",
                              "workload.params.shard_files": "2", "workload.params.lr": "0.001",
                              "proof.every": "2"}, workload="transformers", weights=model)
        people = [_clone(root, hub, f"p{i}") for i in range(2)]
        v = Validator(_clone(root, hub, "val"), device="cpu", name="v1")
        env = {**os.environ, "WOOLF_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
        for i in range(n):
            who = people[i % 2]
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "woolf", "train", "--steps", "4", "--device", "cpu",
                                   "--nproc", "2", "--seed", str(i), "--json"], cwd=who.root, env=env,
                                  capture_output=True, text=True, timeout=900)
            if proc.returncode:
                rows.append({"route": "two processes", "state": "error", "reason": proc.stderr[-300:]})
                continue
            trained = {"training": {"seconds": time.perf_counter() - t0}}
            pr = submit(who, SubmitOptions(contributor=f"p{i % 2}"))
            rows += [_row("two processes, dropout", x, trained, v.ledger, pr) for x in _audit(v, who)]
    return rows


def honest(counts: dict, steps: int) -> dict:
    rows = []
    plan = {"dense": ({}, None, False), "topk": ({"delta.compress": '"topk:0.05,bits:2"'}, None, False),
            "lora": ({"delta.accept": '["dense", "topk", "lora"]'}, "r=2", False),
            "followed": ({"workload.follow_every": "2"}, None, True)}
    for route, n in counts.items():
        t0 = time.perf_counter()
        if route == "two processes":
            got = _two_process(n)
        else:
            overrides, lora, follow = plan[route]
            got = _route(route, n, steps, overrides, lora, follow)
        rows += got
        print(f"honest {route}: {len(got)} PRs in {time.perf_counter() - t0:.0f} s, "
              f"{sum(r['retrain'] == 'matched' for r in got)} matched", flush=True)
    by: dict = {}
    for r in rows:
        b = by.setdefault(r["route"], {"prs": 0, "matched": 0, "false_rejections": 0, "other_rejections": 0})
        b["prs"] += 1
        b["matched"] += r.get("retrain") == "matched"
        b["false_rejections"] += r.get("state") != "merged" and str(r.get("reason", "")).startswith("retrain:")
        b["other_rejections"] += r.get("state") != "merged" and not str(r.get("reason", "")).startswith("retrain:")
    return {"by_route": by, "prs": len(rows), "false_rejections": sum(b["false_rejections"] for b in by.values()),
            "rows": rows}


# -- bytes -----------------------------------------------------------------------------------------------------

def bytes_per_pr(sizes: list[dict], steps: int) -> list[dict]:
    from woolf.participant import SubmitOptions, TrainOptions, submit, train
    from woolf.participant.prove import prove_once
    from woolf.validator import Validator

    out = []
    for params in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            hub = _network(root, {**{f"workload.params.{k}": str(v) for k, v in params.items()},
                                  "validators.retrain_rate": "0"})
            p = _clone(root, hub, "p0")
            train(p, TrainOptions(steps=steps, contributor="p0", device="cpu"))
            pr = submit(p, SubmitOptions(contributor="p0"))
            meta = p.git.show_bytes(f"refs/woolf/pr/{pr['id']}/head:submissions/{pr['id']}/submission.json")
            proof = json.loads(meta)["recipe"]["proof"]
            row = {"params": params, "steps": steps, "links": len(proof["links"]), "delta_bytes": pr["delta_size"],
                   "submission_json_bytes": len(meta), "proof_json_bytes": len(json.dumps(proof, indent=2)),
                   "stored_over_delta": (pr["delta_size"] + len(meta)) / pr["delta_size"]}
        with tempfile.TemporaryDirectory() as tmp:  # a drawn one: what its answer uploads
            root = Path(tmp)
            hub = _network(root, {f"workload.params.{k}": str(v) for k, v in params.items()})
            p, val = _clone(root, hub, "p0"), _clone(root, hub, "val")
            train(p, TrainOptions(steps=steps, contributor="p0", device="cpu"))
            submit(p, SubmitOptions(contributor="p0"))
            Validator(val, device="cpu", name="v1").run()
            answered = prove_once(p)
            row["answer_bytes"] = sum(a["bytes"] for a in answered)
            row["answer_over_delta"] = row["answer_bytes"] / row["delta_bytes"]
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="exactness,detection,cost,honest,bytes")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default="proof_check.json")
    ap.add_argument("--trials", type=int, default=30)
    args = ap.parse_args()
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    import torch

    torch.set_num_threads(1)
    parts = args.parts.split(",")
    result: dict = {"machine": machine(), "args": vars(args)}
    small = args.smoke
    if "exactness" in parts:
        result["exactness"] = exactness(SMALL if small else DEMO, 1 if small else 3, 8 if small else 40,
                                        2 if small else 5, 2)
        write_json(args.out, result)
    if "detection" in parts:
        result["detection"] = detection(SMALL if small else DEMO, 10 if small else 50,
                                        1 if small else args.trials, 1, 1 if small else 4)
        write_json(args.out, result)
    if "cost" in parts:
        result["cost"] = cost(SMALL if small else DEMO, 10 if small else 60, 1 if small else 4, 1, 1 if small else 3)
        write_json(args.out, result)
    if "honest" in parts:
        counts = ({"dense": 2} if small else
                  {"dense": 120, "topk": 70, "lora": 60, "followed": 30, "two processes": 12})
        result["honest"] = honest(counts, 8 if small else 20)
        write_json(args.out, result)
    if "bytes" in parts:
        result["bytes"] = bytes_per_pr([SMALL] if small else [SMALL, DEMO], 8 if small else 20)
    print(write_json(args.out, result))


if __name__ == "__main__":
    main()
