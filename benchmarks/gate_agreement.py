"""Every PR of a demo-like run judged twice against the same main, `validators.eval = "full"` and `"sequential"`:
are the gate's decisions the same, and what did each evaluate (issue 50, item 4)?

Usage:
    python benchmarks/gate_agreement.py                                 # charlm, continued-domain, 30 rounds
    python benchmarks/gate_agreement.py --workload transformers --rounds 6   # a small Llama pretrained here
    python benchmarks/gate_agreement.py --rounds 2                      # the smoke size

A ledger as `woolf demo` makes it (charlm: the continued-domain regime, its pretrained genesis and
settings, `workload.steps` 30; transformers: a 4-layer Llama with a locally trained tokenizer,
pretrained here for ``--pretrain`` steps on the corpus so that PRs move it by a little), and
each round every participant trains with `woolf train` and submits (most from the newest main,
every third one from the main it pulled two rounds before: a stale PR, merged attenuated), one
submits noise of a merged delta's norm, one trains on the public benchmark (an overfitter). Then
each open PR, in queue order, is judged by `step.evaluate` twice, from two clones (two validators'
states) against the same main: once with the ledger's config set to "full", once "sequential".
The "full" verdict is recorded (merged or rejected), so main moves as it did before. Compared per
PR: the decision, the reason, the not-unique mark, and the tokens the gate and the scoring
evaluated on the candidate's side. Results go to benchmarks/results/gate_agreement_<workload>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def _clone(root: Path, name: str):
    from woolf.ledger.ledger import Ledger

    _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
    _git("config", "user.name", name, cwd=root / name)
    return Ledger.open(root / name)


def charlm_ledger(root: Path, names: list[str]):
    from woolf.demo.regimes import prepare_regime
    from woolf.ledger.ledger import Ledger

    weights, added = prepare_regime("continued-domain", names, {"workload.steps": "30"})
    return Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), weights=weights,
                                                     overrides={"workload.steps": "30", **added}))


def transformers_ledger(root: Path, pretrain: int):
    """A 4-layer Llama (hidden 128, a 4096-token BPE trained on the stdlib) pretrained ``pretrain`` steps on the
    training pool (every seventh file, as charlm's pretrained genesis), as the genesis of a transformers ledger."""
    import validator_cost
    from safetensors.torch import save_file

    from woolf.ledger.ledger import Ledger
    from woolf.workloads import corpus
    from woolf.workloads.base import TrainData

    validator_cost.SHAPES["agreement"] = (4, 128, 4, 2, 384, 4096)
    validator_cost.make_model(root / "model", "agreement")
    pre = Ledger.init(root / "pre", CreateOptions(storage=str(root / "pre-storage"), workload="transformers",
                                                  weights=root / "model"))
    wl = pre.workload()
    data = TrainData([corpus.read(f) for f in corpus.pool_files()[::7]], "pretraining")
    weights = pre.load_weights(pre.head())
    names = set(weights)
    trained, summary = wl.train(weights, data, pretrain, device="cpu", seed=1)
    print(f"pretrained {pretrain} steps in {summary['seconds']:.0f} s, train loss {summary['train_loss']:.3f}",
          flush=True)
    save_file({k: v.contiguous() for k, v in trained.items() if k in names}, root / "model" / "model.safetensors")
    return Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers",
                                                     weights=root / "model", overrides={"workload.steps": "20"}))


def _noise_weights(led, target: float, rng: random.Random) -> dict:
    """main's weights plus Gaussian noise of norm ``target`` (a merged delta's)."""
    import torch

    w = led.load_weights(led.head())
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    d = {k: torch.randn(v.shape, generator=g) for k, v in w.items()}
    total = sum(float(x.pow(2).sum()) for x in d.values()) ** 0.5
    return {k: (w[k] + d[k] * (target / total)).to(w[k].dtype) for k in w}


def submit_round(clones: dict, rnd: int, steps: int, rng: random.Random, bench_file: Path) -> None:
    """Every participant trains (every third round each of p1..p5 in turn from the main it already has: a
    stale PR) and submits; "noise" submits noise of a recent merged delta's norm; "overfit" trains on the
    public benchmark."""
    from safetensors.torch import save_file

    from woolf.ledger.verdicts import merged_records
    from woolf.participant import SubmitOptions, TrainOptions, submit, train

    for i, (name, led) in enumerate(clones.items()):
        try:
            if name == "noise":
                led.pull()
                norms = sorted(r.delta_norm for r in merged_records(led, limit=8) if r.delta_norm)
                path = led.root / "noise.safetensors"
                save_file(_noise_weights(led, norms[len(norms) // 2] if norms else 1.0, rng), path)
                submit(led, SubmitOptions(weights=path, base_version=led.head().version, contributor=name))
                continue
            stale = name != "overfit" and rnd >= 1 and (rnd + i) % 3 == 0
            train(led, TrainOptions(steps=rng.choice([max(1, steps // 2), steps, steps]), contributor=name,
                                    device="cpu", seed=rng.randrange(1000), offline=stale, task=False,
                                    data=str(bench_file) if name == "overfit" else None))
            submit(led, SubmitOptions(contributor=name))
        except Exception as exc:  # noqa: BLE001 - a participant's failure is reported, the run goes on
            print(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)


def judge_both(val, seq_ctx, sub_id: str) -> dict:
    """PR ``sub_id`` judged under "full" (and recorded) and "sequential", against the same main."""
    from woolf.timing import Timer
    from woolf.validator.intake import evict_rejected
    from woolf.validator.publish import merge
    from woolf.validator.stages import merged_deltas
    from woolf.validator.step import evaluate, fresh, verdict_trailers

    ctx = val.ctx
    pr, main = fresh(ctx, sub_id)
    ctx.ledger.config.validators.eval = "full"
    t_full = Timer()
    v_full, step = evaluate(ctx, pr, main, t_full, write_ahead=True)
    pr2, main2 = fresh(seq_ctx, sub_id)
    assert main2.commit == main.commit and pr2.head == pr.head, (main.commit, main2.commit, pr.head, pr2.head)
    seq_ctx.ledger.config.validators.eval = "sequential"
    t_seq = Timer()
    v_seq, _ = evaluate(seq_ctx, pr2, main2, t_seq)
    if v_full.accepted:
        merge(ctx, pr, main, v_full, step, t_full)
    else:
        evict_rejected(ctx.ledger, pr, merged_deltas(ctx, main))
        ctx.forge.reject(pr, v_full.reason, verdict_trailers(ctx, v_full, t_full))
    return {"id": sub_id, "contributor": pr.contributor, "staleness": v_full.staleness,
            "full": _row(v_full, t_full), "sequential": _row(v_seq, t_seq),
            "same_decision": v_full.accepted == v_seq.accepted,
            "same_mark": ("not-unique" in v_full.flags) == ("not-unique" in v_seq.flags)}


def _row(v, timer) -> dict:
    m = v.metrics or {}
    return {"accepted": v.accepted, "reason": v.reason, "flags": list(v.flags), "scores": v.scores,
            "before": m.get("before"), "after": m.get("after"), "timings": dict(timer)}


def study(root: Path, workload: str, rounds: int, pretrain: int) -> dict:
    from woolf.forges import forge_for
    from woolf.validator import Validator
    from woolf.validator.context import ValidatorContext
    from woolf.validator.state import ValidatorState

    names = ["p1", "p2", "p3", "p4", "p5"]
    t0 = time.perf_counter()
    work = charlm_ledger(root, names) if workload == "charlm" else transformers_ledger(root, pretrain)
    steps = work.config.workload.steps
    _git("clone", "-q", "--bare", str(work.root), str(root / "hub.git"), cwd=root)
    bench_file = root / "public-benchmark.txt"
    bench_file.write_bytes(work.benchmark())
    clones = {n: _clone(root, n) for n in [*names, "noise", "overfit"]}
    val = Validator(_clone(root, "val"), device="cpu", name="full")
    seq_led = _clone(root, "seq")
    seq_led.main_ref = "refs/remotes/origin/main"  # as a Validator reads main
    seq_ctx = ValidatorContext(seq_led, forge_for(seq_led), "cpu", "sequential", ValidatorState())
    print(f"ledger ready in {time.perf_counter() - t0:.0f} s; {workload}, {rounds} rounds", flush=True)
    rng = random.Random(0)
    rows: list[dict] = []
    for rnd in range(rounds):
        submit_round(clones, rnd, steps, rng, bench_file)
        val.ledger.fetch()
        for pr in sorted(val.forge.list(state="open"), key=lambda p: p.queue_key()):
            row = judge_both(val, seq_ctx, pr.id)
            rows.append(row)
            f, s = row["full"], row["sequential"]
            print(f"r{rnd} {row['contributor']:>7} s{row['staleness']}: full {'A' if f['accepted'] else 'R'} "
                  f"seq {'A' if s['accepted'] else 'R'}{'' if row['same_decision'] else ' DIFFERENT'} "
                  f"tokens {(s['after'] or {}).get('tokens')}/{(f['after'] or {}).get('tokens')} "
                  f"scoring {(s['scores'] or {}).get('tokens')} | {f['reason'][:90]}", flush=True)
    return {"workload": workload, "rounds": rounds, "steps": steps, "prs": rows,
            "seconds": round(time.perf_counter() - t0, 1)}


def summary(out: dict) -> dict:
    rows = out["prs"]
    full_tokens = [r["full"]["after"]["tokens"] for r in rows if (r["full"]["after"] or {}).get("tokens")]
    seq_tokens = [r["sequential"]["after"]["tokens"] for r in rows if (r["sequential"]["after"] or {}).get("tokens")]
    sc_full = [r["full"]["scores"] for r in rows if r["full"]["scores"]]
    sc_seq = [r["sequential"]["scores"] for r in rows if r["sequential"]["scores"]]
    return {"prs": len(rows), "same_decision": sum(r["same_decision"] for r in rows),
            "accepted_full": sum(r["full"]["accepted"] for r in rows),
            "accepted_sequential": sum(r["sequential"]["accepted"] for r in rows),
            "different": [r["id"] for r in rows if not r["same_decision"]],
            "early_rejections": sum(1 for r in rows if not r["sequential"]["accepted"]
                                    and "validators.eval" in r["sequential"]["reason"]),
            "same_mark": sum(r["same_mark"] for r in rows),
            "gate_tokens": {"full": sum(full_tokens), "sequential": sum(seq_tokens)},
            "scoring_prs": {"full": len(sc_full), "sequential": len(sc_seq)},
            "scoring_tokens_sequential": sum(s.get("tokens", 0) for s in sc_seq),
            "evaluation_seconds": {m: round(sum(r[m]["timings"].get("evaluation", 0) for r in rows), 1)
                                   for m in ("full", "sequential")},
            "scoring_seconds": {m: round(sum(r[m]["timings"].get("scoring", 0) for r in rows), 1)
                                for m in ("full", "sequential")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=["charlm", "transformers"], default="charlm")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--pretrain", type=int, default=300, help="transformers: steps of central pretraining")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="woolf-agree-", dir=a.workdir) as tmp:
        out = study(Path(tmp), a.workload, a.rounds, a.pretrain)
    out["machine"] = machine()
    out["load_average"] = {"start": start, "end": os.getloadavg()}
    out["summary"] = summary(out)
    print(json.dumps(out["summary"], indent=2), flush=True)
    print(f"wrote {write_json(a.out or f'gate_agreement_{a.workload}.json', out)} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
