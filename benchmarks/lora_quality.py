"""What LoRA contributions do to training quality at the demo's scale (issue 33, item 5; RESULTS.md §17b).

Usage:
    python benchmarks/lora_quality.py                      # the demo's --quick shape: 2 x 4 x 15, 3 seeds
    python benchmarks/lora_quality.py --participants 3 --rounds 8 --steps 30 --out lora_quality_demo.json
    python benchmarks/lora_quality.py --smoke               # seconds: a tiny model, one seed (the test suite)

The regime is `woolf demo`'s default, continued-domain: genesis is the charlm checkpoint the demo
pretrains (workloads/charlm_pretrained.py, cached), each participant trains on its own part of the
corpus (``domains``: the shard of its own part at the version it trained from), a fresh optimizer ramps
over ``optimizer_warmup`` = 60 steps. A ledger run is simulated in-process with the functions the
network runs, in the order the demo's waiting participants produce: each round every participant
trains from the round's version, and the validator merges their deltas in turn at staleness 0..N-1,
``alpha_base`` 1/N times polynomial staleness (1+s)^-0.5, each judged by the demo's gate (policy
defaults: a merge may raise the benchmark by at most 0.02). Arms, each at the same steps:

- ``dense``: every parameter trained, the optimizer state carried between a participant's
  contributions (the demo's default, ``state_dir``);
- ``lora-R``: peft adapters of rank R on the blocks' linear layers (workloads/lora.py), fresh
  each contribution, the exact product (core/lora.py ``expand``) merged as a dense delta;
- references (demo/references.py): each participant ``alone`` dense (one continuous run over its
  shards) and ``alone-lora-R`` (its contributions' products added at scale 1, round by round), and
  synchronous data parallel (dense, the bound).

``--ramp-ablation``: also ``lora-R-ramp60``, LoRA with the dense contributions' own learning-rate
ramp (the whole 60-step ``optimizer_warmup`` of a fresh optimizer) instead of workloads/lora.py's ramp
over a third of the contribution's steps.

Seeds change every training seed (batches, adapter initialisation); genesis and data are fixed.
Results: benchmarks/results/lora_quality.json (or --out).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.core.lora import expand  # noqa: E402
from woolf.core.merge_rules import Rule, merge_step  # noqa: E402
from woolf.core.policy import decide  # noqa: E402
from woolf.core.staleness import attenuation  # noqa: E402
from woolf.demo.references import alone_lora, shards_of  # noqa: E402
from woolf.protocol.config import PolicyConfig, StalenessConfig  # noqa: E402
from woolf.protocol.lora_spec import parse_lora  # noqa: E402
from woolf.workloads import lora as lora_trainer  # noqa: E402
from woolf.workloads.charlm import CharLM  # noqa: E402
from woolf.workloads.charlm_pretrained import PRETRAIN_STEPS, pretrained_genesis  # noqa: E402


def world(n: int, smoke: bool):
    """(workload, genesis, benchmark) as `woolf demo` builds them for continued-domain with n participants."""
    names = [f"p{i + 1}" for i in range(n)]
    small = {"d_model": 32, "n_layer": 1, "context": 32, "batch_size": 8, "benchmark_bytes": 4096,
             "shard_files": 2} if smoke else {}
    wl = CharLM(domains=names, optimizer_warmup=60, **small)
    from safetensors.torch import load_file

    genesis = load_file(str(pretrained_genesis(wl, 40 if smoke else PRETRAIN_STEPS)))
    return wl, names, genesis, wl.benchmark_bytes()


def contribute(wl, weights: dict, data, steps: int, seed: int, lora: int | None, state: Path) -> dict:
    """One contribution's delta: dense (optimizer state carried in ``state``) or a LoRA product."""
    if lora is None:
        trained, _ = wl.train(weights, data, steps, seed=seed, state_dir=state)
        return {k: trained[k] - weights[k] for k in weights}
    factors, _ = wl.train_lora(weights, data, steps, parse_lora(f"r={lora}"), seed=seed)
    delta = {k: torch.zeros_like(v) for k, v in weights.items()}
    for target, (A, B, scale) in factors.items():
        delta[target] = expand(A, B, float(torch.tensor(scale, dtype=torch.float32)))
    return delta


def ledger(wl, names, genesis, bench, rounds: int, steps: int, seed: int, lora: int | None) -> dict:
    n = len(names)
    rule, scfg, policy = Rule("attenuated", round(1 / n, 4)), StalenessConfig("polynomial"), PolicyConfig()
    cur, version = genesis, 0
    cur_loss = wl.evaluate(cur, bench)["loss"]
    merged, curve = 0, [cur_loss]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            base, bv = cur, version
            deltas = [contribute(wl, base, wl.default_data(name, bv), steps, seed * 1000 + r * n + i, lora,
                                 Path(tmp) / name) for i, name in enumerate(names)]
            for delta in deltas:  # in turn: staleness 0, 1, ..., n - 1
                step = merge_step(rule, cur, None, delta, attenuation(scfg, version - bv))
                loss = wl.evaluate(step.probe, bench)["loss"]
                if decide(policy, {"loss": cur_loss}, {"loss": loss}).accepted:
                    cur, cur_loss, version, merged = step.candidate, loss, version + 1, merged + 1
                    curve.append(loss)
    return {"final_loss": cur_loss, "merged": merged, "judged": rounds * n, "curve": curve}


def references(wl, names, genesis, bench, rounds: int, steps: int, seed: int, ranks: list[int]) -> dict:
    out = {}
    for name in names:
        shards = shards_of(wl, name, rounds)
        dense, _ = wl.train(genesis, shards, rounds * steps, seed=seed)
        out.setdefault("alone", {})[name] = wl.evaluate(dense, bench)["loss"]
        for r in ranks:
            wl.lora = parse_lora(f"r={r}")
            w = alone_lora(wl, genesis, shards, rounds, steps, seed=seed)
            out.setdefault(f"alone-lora-{r}", {})[name] = wl.evaluate(w, bench)["loss"]
        wl.lora = None
    dp = wl.train_data_parallel(genesis, [shards_of(wl, n, rounds) for n in names], rounds * steps, seed=seed)
    out["parallel"] = wl.evaluate(dp, bench)["loss"]
    return out


def stats(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "runs": values}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--participants", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--ranks", default="4,16")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--ramp-ablation", action="store_true", help="also LoRA with the dense 60-step ramp")
    ap.add_argument("--out", default="lora_quality.json")
    args = ap.parse_args()
    if args.smoke:
        args.participants, args.rounds, args.steps, args.seeds, args.ranks = 2, 1, 3, 1, "2"
    torch.set_num_threads(1)
    ranks = [int(r) for r in args.ranks.split(",")]
    wl, names, genesis, bench = world(args.participants, args.smoke)
    genesis_loss = wl.evaluate(genesis, bench)["loss"]
    factor_values = {}
    for r in ranks:
        f, _ = wl.train_lora(genesis, wl.default_data(names[0], 0), 1, parse_lora(f"r={r}"))
        factor_values[r] = sum(A.numel() + B.numel() for A, B, _ in f.values())
    dense_values = sum(t.numel() for t in genesis.values())
    runs, t0 = [], time.time()
    for seed in range(args.seeds):
        run = {"seed": seed, "ledger": {}}
        for arm, lora in [("dense", None), *((f"lora-{r}", r) for r in ranks)]:
            run["ledger"][arm] = ledger(wl, names, genesis, bench, args.rounds, args.steps, seed, lora)
        for r in ranks if args.ramp_ablation else ():
            shipped = lora_trainer.lr_factor
            lora_trainer.lr_factor = lambda wl, step, steps: min(1.0, (step + 1) / wl.optimizer_warmup)
            try:
                run["ledger"][f"lora-{r}-ramp60"] = ledger(wl, names, genesis, bench, args.rounds, args.steps,
                                                           seed, r)
            finally:
                lora_trainer.lr_factor = shipped
        run["references"] = references(wl, names, genesis, bench, args.rounds, args.steps, seed, ranks)
        runs.append(run)
        print(f"seed {seed}: " + "  ".join(f"{k} {v['final_loss']:.4f} ({v['merged']}/{v['judged']})"
                                           for k, v in run["ledger"].items())
              + "  " + "  ".join(f"{k} {min(v.values()) if isinstance(v, dict) else v:.4f}"
                                 for k, v in run["references"].items()) + f"  [{time.time() - t0:.0f}s]", flush=True)
        out = {"machine": machine(), "settings": vars(args), "genesis_loss": genesis_loss,
               "factor_values_per_pr": factor_values, "dense_values_per_pr": dense_values,
               "cpu_seconds": round(time.process_time(), 1), "wall_seconds": round(time.time() - t0, 1),
               "summary": summarize(runs), "runs": runs}
        path = write_json(args.out, out)  # after every seed: a run stopped early keeps what it measured
    for k, v in out["summary"].items():
        print(f"{k:<28} {v['mean']:.4f} ± {v['sd']:.4f}")
    print(path)


def summarize(runs: list[dict]) -> dict:
    summary = {f"ledger {k}": stats([r["ledger"][k]["final_loss"] for r in runs]) for k in runs[0]["ledger"]}
    for k in runs[0]["references"]:
        if k == "parallel":
            summary["data parallel (dense)"] = stats([r["references"][k] for r in runs])
        else:
            summary[f"{k} best"] = stats([min(r["references"][k].values()) for r in runs])
            summary[f"{k} mean"] = stats([statistics.mean(r["references"][k].values()) for r in runs])
    return summary


if __name__ == "__main__":
    main()
