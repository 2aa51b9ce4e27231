"""What LoRA contributions do to training quality, lever by lever, in process (RESULTS.md §17b).

Usage:
    python benchmarks/lora_quality.py                      # the demo's --quick shape: 2 x 4 x 15, 3 seeds
    python benchmarks/lora_quality.py --participants 3 --rounds 8 --steps 30 --arms \\
        "lora-16=r=16,lr_scale=1" "lora-16-lr10=r=16,lr_scale=10" "lora-16-carry=r=16,carry=1" --alone
    python benchmarks/lora_quality.py --model gpt2 --participants 3 --rounds 4 --steps 20   # transformers
    python benchmarks/lora_quality.py --smoke               # seconds: a tiny model, one seed (the test suite)

A ledger run of `woolf demo`'s default regime, continued-domain, is reproduced in process with the
functions the network runs (no processes, git or storage: a configuration x 3 seeds is seconds to a
few minutes of CPU instead of a demo's minutes each): genesis is a pretrained checkpoint
(workloads/charlm_pretrained.py, cached), each participant trains on its own part of the corpus
(``domains``: the shard of its part at the version it trained from), a fresh dense optimizer ramps over
``optimizer_warmup`` = 60 steps (demo/regimes.py). Each round every participant trains from the
round's version and the validator merges their deltas in turn at staleness 0..N-1 as
current + ``alpha_base`` (1/N) * polynomial staleness (1+s)^-0.5 * delta, each judged by the demo's
gate (policy defaults: a merge may raise the benchmark by at most 0.02).

Arms, at the same steps per contribution: ``dense`` (every parameter, the optimizer state carried
between a participant's contributions: the demo's default) and LoRA arms ``NAME=SPEC[|norms]
[|ramp=none|60][|keepb]``: SPEC is `--lora` text (protocol/lora_spec.py) trained by the one trainer
(workloads/lora.py; ``carry=1``: each participant's adapters and AdamW moments carried across its
contributions, ``AdapterState``, re-based onto each new version); ``norms``: the LayerNorms and
biases trained too (sent as a dense part: the delta file does not carry it; a lever measured here
only); ``ramp``: the fresh optimizer's ramp (default: the trainer's, a third of the steps; none; the
dense 60 steps); ``keepb`` (with ``carry=1``): B carried too, the frozen base re-based by the last
product and the delta the change of the product (rank 2r: a lever measured here only). An arm
``NAME=dense:PART+PART`` is a diagnostic: charlm's dense training of the parameters whose names contain
a PART only (e.g. ``dense:qkv+proj+mlp``: LoRA's targets, at full rank, with their biases). ``--ranks 4,16`` adds ``lora-R=r=R`` arms. References (demo/references.py):
each participant ``alone`` dense (one continuous run over its shards), ``alone-ARM`` with LoRA as it
contributes (``--alone``; always for the rank arms), and synchronous data parallel (dense, the bound).

``--model gpt2|llama``: the transformers workload on a small GPT-2 or Llama built locally
(examples/make_tiny_model.py), pretrained centrally like charlm's genesis, the same regime.
Seeds change every training seed (batches, adapter initialisation); genesis and data are fixed.
Runs go to ``--jobs`` processes; each (arm, seed) result is cached in results/lora_quality_cache*.json
(``--cache``: one file per concurrent run, all read; ``--fresh`` ignores them). Results: benchmarks/results/lora_quality.json (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, machine, write_json  # noqa: E402

from woolf.core.lora import expand  # noqa: E402
from woolf.core.merge_rules import Rule, merge_step  # noqa: E402
from woolf.core.policy import decide  # noqa: E402
from woolf.core.staleness import attenuation  # noqa: E402
from woolf.protocol.config import PolicyConfig, StalenessConfig  # noqa: E402
from woolf.protocol.lora_spec import parse_lora  # noqa: E402
from woolf.workloads import corpus  # noqa: E402
from woolf.workloads import lora as trainer  # noqa: E402
from woolf.workloads import lora_carry as carry  # noqa: E402
from woolf.workloads.base import TrainData  # noqa: E402
from woolf.workloads.charlm_data import domain_shard  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# charlm's own size (2 layers of width 64), with a 512-token BPE vocabulary
HF_SHAPES = {"gpt2": {"arch": "gpt2", "layers": 2, "width": 64, "heads": 4},
             "llama": {"arch": "llama", "layers": 2, "width": 64, "heads": 4}}


@dataclass
class World:
    wl: object
    names: list
    genesis: dict
    bench: bytes
    kind: str

    def data(self, name: str, version: int) -> TrainData:
        if self.kind == "charlm":
            return self.wl.default_data(name, version)
        i, n = self.names.index(name), len(self.names)
        files = domain_shard(name, i, n, version, self.wl.shard_files)
        return TrainData([corpus.read(f) for f in files], f"domain {i + 1}/{n}:{name}@v{version}", files)

    def shards(self, name: str, rounds: int) -> TrainData:
        parts = [self.data(name, r) for r in range(rounds)]
        return TrainData([t for p in parts for t in p.texts], f"shards:{name}", [f for p in parts for f in p.files])


def _hf_workload(model: str, smoke: bool):
    from woolf.workloads.hf import Transformers

    spec = importlib.util.spec_from_file_location("make_tiny_model", ROOT / "examples" / "make_tiny_model.py")
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    shape = dict(HF_SHAPES[model], **({"layers": 1, "width": 32, "heads": 2} if smoke else {}))
    from woolf.workloads.charlm_pretrained import cache_dir

    d = cache_dir() / f"lora-study-{model}-{shape['layers']}x{shape['width']}"
    if not (d / "config.json").exists():
        tiny.make_tiny_model(d, context=64, **shape)
    files = {n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in ("config.json", "tokenizer.json")}
    wl = Transformers(model="m", files=files, context=64, batch_size=16, lr=3e-3, optimizer_warmup=60,
                      benchmark_bytes=32768 if not smoke else 4096, shard_files=8 if not smoke else 2)
    wl.bind(lambda rel: (d / rel.split("/", 1)[1]).read_bytes())
    return wl


def world(model: str, n: int, smoke: bool) -> World:
    """(workload, genesis, benchmark) as `woolf demo` builds them for continued-domain with n participants."""
    from safetensors.torch import load_file

    from woolf.workloads.charlm import CharLM
    from woolf.workloads.charlm_pretrained import PRETRAIN_STEPS, pretrained_genesis

    names = [f"p{i + 1}" for i in range(n)]
    if model == "charlm":
        small = {"d_model": 32, "n_layer": 1, "context": 32, "batch_size": 8, "benchmark_bytes": 4096,
                 "shard_files": 2} if smoke else {}
        wl = CharLM(domains=names, optimizer_warmup=60, **small)
        steps = 40 if smoke else PRETRAIN_STEPS
    else:
        wl = _hf_workload(model, smoke)
        steps = 20 if smoke else PRETRAIN_STEPS
    genesis = load_file(str(pretrained_genesis(wl, steps)))
    return World(wl, names, genesis, wl.benchmark_bytes(), model)


@dataclass(frozen=True)
class Arm:
    name: str
    spec: str | None  # None: dense
    norms: bool = False
    ramp: str = ""  # "": the trainer's; "none"; "60": the dense 60-step ramp
    keepb: bool = False  # carry B too, the frozen base re-based by the last product (delta: new - old product)

    @staticmethod
    def parse(text: str) -> Arm:
        name, _, rest = text.partition("=")
        parts = rest.split("|")
        opts = {p.partition("=")[0]: p.partition("=")[2] for p in parts[1:]}
        if set(opts) - {"norms", "ramp", "keepb"}:
            raise SystemExit(f"arm {text!r}: options are norms, ramp=none|60, keepb")
        return Arm(name, parts[0], "norms" in opts, opts.get("ramp", ""), "keepb" in opts)


class Trainable:
    """``norms``: the trainer's peft model with its 1-D parameters (LayerNorms, biases) trained too."""

    def __init__(self):
        self.shipped, self.kept = trainer._adapted, None

    def __enter__(self):
        def adapted(wl, model, spec, seed):
            names = {id(p): n for n, p in model.named_parameters()}
            m = self.shipped(wl, model, spec, seed)
            for p in m.parameters():
                if id(p) in names and p.ndim == 1:
                    p.requires_grad_(True)
            self.kept = (names, m)
            return m

        trainer._adapted = adapted
        return self

    def __exit__(self, *exc):
        trainer._adapted = self.shipped

    def deltas(self, base: dict) -> dict:
        names, m = self.kept
        return {names[id(p)]: p.detach().float() - base[names[id(p)]] for p in m.parameters()
                if id(p) in names and p.ndim == 1}


class Ramp:
    def __init__(self, how: str):
        self.how, self.shipped = how, trainer.lr_factor

    def __enter__(self):
        if self.how == "none":
            trainer.lr_factor = lambda wl, step, steps: 1.0
        elif self.how:
            n = int(self.how)
            trainer.lr_factor = lambda wl, step, steps: min(1.0, (step + 1) / n)

    def __exit__(self, *exc):
        trainer.lr_factor = self.shipped


class KeepB:
    """``keepb``: the carried state's B restored too (the trainer re-bases with B = 0)."""

    def __init__(self, on: bool):
        self.on, self.shipped = on, carry.restore

    def __enter__(self):
        def restore(state, slots, opt, spec):
            self.shipped(state, slots, opt, spec)
            with torch.no_grad():
                for key, p in slots.items():
                    if key.endswith(".lora_B"):
                        p.copy_(state.tensors[key])

        if self.on:
            carry.restore = restore

    def __exit__(self, *exc):
        carry.restore = self.shipped


def lora_delta(w: World, weights: dict, data, steps: int, seed: int, arm: Arm, state) -> dict:
    """One LoRA contribution's dense update: each target's exact product (core/lora.py), plus ``norms``."""
    delta = {k: torch.zeros_like(v) for k, v in weights.items()}
    extra = Trainable() if arm.norms else None
    spec = parse_lora(arm.spec)
    old = {}  # keepb: the last product, taken out of the frozen base and out of the delta
    if arm.keepb and spec.carry and state.tensors:
        old = {k[: -len(".lora_A")]: spec.scale * (state.tensors[k[:-1] + "B"] @ v) for k, v in state.tensors.items()
               if k.endswith(".lora_A") and "/" not in k}
    given = {k: v - old[k] if k in old else v for k, v in weights.items()}
    with extra or contextlib.nullcontext(), Ramp(arm.ramp), KeepB(arm.keepb):
        factors, _ = trainer.train_lora(w.wl, given, data, steps, spec, seed=seed,
                                        state=state if spec.carry else None)
        if extra is not None:
            delta.update(extra.deltas(weights))
    for target, (A, B, scale) in factors.items():
        delta[target] = expand(A, B, float(torch.tensor(scale, dtype=torch.float32))) - old.get(target, 0.0)
    return delta


def dense_subset(w: World, weights: dict, data, steps: int, seed: int, only: str, state: dict) -> dict:
    """A diagnostic: charlm's dense training (AdamW, moments carried in ``state``, the same ramp) of the
    parameters whose names contain one of ``only`` (``+``-separated), the rest frozen."""
    import torch.nn.functional as F

    wl = w.wl
    model = wl.load_model(weights, "cpu").train()
    names = {p: n for n, p in model.named_parameters()}
    params = [p for p, n in names.items() if any(o in n for o in only.split("+"))]
    for p in model.parameters():
        p.requires_grad_(p in set(params))
    opt = torch.optim.AdamW(params, lr=wl.lr, weight_decay=0.0)
    for p in params:
        if names[p] in state:
            opt.state[p] = {k: v.clone() for k, v in state[names[p]].items()}
    done = int(state.get("_step", 0))
    batches = wl.batches(data, torch.Generator().manual_seed(seed))
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = wl.lr_at(step) * wl.opt_factor(done + step)
        x, y = next(batches)
        loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    state.update({names[p]: dict(opt.state[p]) for p in params}, _step=done + steps)
    return {k: v.detach() - weights[k] for k, v in model.state_dict().items()}


def contribute(w: World, weights: dict, data, steps: int, seed: int, arm: Arm, state) -> dict:
    """One contribution's delta: dense (optimizer state carried in ``state``, a folder) or LoRA."""
    if arm.spec and arm.spec.startswith("dense:"):
        return dense_subset(w, weights, data, steps, seed, arm.spec.split(":", 1)[1], state)
    if arm.spec is None:
        trained, _ = w.wl.train(weights, data, steps, seed=seed, state_dir=state)
        return {k: trained[k].float() - weights[k].float() for k in weights}
    return lora_delta(w, weights, data, steps, seed, arm, state)


def _state(arm: Arm, tmp: str, name: str):
    if arm.spec and arm.spec.startswith("dense:"):
        return {}
    return Path(tmp) / name if arm.spec is None else trainer.AdapterState()


def ledger(w: World, rounds: int, steps: int, seed: int, arm: Arm, gate: bool = True) -> dict:
    n = len(w.names)
    rule, scfg, policy = Rule("attenuated", round(1 / n, 4)), StalenessConfig("polynomial"), PolicyConfig()
    cur, version = w.genesis, 0
    cur_loss = w.wl.evaluate(cur, w.bench)["loss"]
    merged, curve = 0, [cur_loss]
    with tempfile.TemporaryDirectory() as tmp:
        states = {name: _state(arm, tmp, name) for name in w.names}
        for r in range(rounds):
            base, bv = cur, version
            deltas = [contribute(w, base, w.data(name, bv), steps, seed * 1000 + r * n + i, arm, states[name])
                      for i, name in enumerate(w.names)]
            for delta in deltas:  # in turn: staleness 0, 1, ..., n - 1
                step = merge_step(rule, cur, None, delta, attenuation(scfg, version - bv))
                loss = w.wl.evaluate(step.probe, w.bench)["loss"] if gate else cur_loss  # no gate: all taken
                if decide(policy, {"loss": cur_loss}, {"loss": loss}).accepted:
                    cur, cur_loss, version, merged = step.candidate, loss, version + 1, merged + 1
                    curve.append(loss)
    final = cur_loss if gate else w.wl.evaluate(cur, w.bench)["loss"]
    return {"final_loss": final, "merged": merged, "judged": rounds * n, "curve": curve}


def alone(w: World, name: str, rounds: int, steps: int, seed: int, arm: Arm) -> float:
    """The participant alone: dense, one continuous run over its shards; LoRA as it contributes (each
    contribution's product added at scale 1 before the next, adapters carried when the arm carries them)."""
    shards = w.shards(name, rounds)
    if arm.spec is None:
        weights, _ = w.wl.train(w.genesis, shards, rounds * steps, seed=seed)
        return w.wl.evaluate(weights, w.bench)["loss"]
    weights, state = dict(w.genesis), trainer.AdapterState()
    for r in range(rounds):
        delta = lora_delta(w, weights, shards, steps, seed * 1000 + r, arm, state)
        weights = {k: v + delta[k] if delta[k].any() else v for k, v in weights.items()}
    return w.wl.evaluate(weights, w.bench)["loss"]


_WORLD: dict = {}


def _task(args: tuple) -> tuple[tuple, float | dict, float]:
    key, model, n, smoke, rounds, steps, seed, arm, what, gate = args
    torch.set_num_threads(1)
    if (model, n, smoke) not in _WORLD:
        _WORLD[(model, n, smoke)] = world(model, n, smoke)
    w = _WORLD[(model, n, smoke)]
    t0 = time.process_time()
    if what == "ledger":
        out = ledger(w, rounds, steps, seed, arm, gate)
    elif what == "parallel":
        dp = w.wl.train_data_parallel(w.genesis, [w.shards(x, rounds) for x in w.names], rounds * steps, seed=seed)
        out = w.wl.evaluate(dp, w.bench)["loss"]
    else:
        out = alone(w, what.split(":", 1)[1], rounds, steps, seed, arm)
    return key, out, time.process_time() - t0


def stats(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "runs": values}


def _paired(a: list[float], b: list[float]) -> dict:
    return stats([x - y for x, y in zip(a, b, strict=True)])


def summarize(results: dict, arms: list[Arm], seeds: int, names: list[str], alone_arms: set[str]) -> dict:
    summary = {}
    runs = {a.name: [results[(a.name, s, "ledger")]["final_loss"] for s in range(seeds)] for a in arms}
    for a in arms:
        summary[f"ledger {a.name}"] = stats(runs[a.name])
        if a.name != "dense":
            summary[f"ledger {a.name} - dense"] = _paired(runs[a.name], runs["dense"])
        if a.name in alone_arms:
            tag = "alone" if a.name == "dense" else f"alone-{a.name}"
            best = [min(results[(a.name, s, f"alone:{x}")] for x in names) for s in range(seeds)]
            summary[f"{tag} best"] = stats(best)
            summary[f"{tag} mean"] = stats([statistics.mean(results[(a.name, s, f"alone:{x}")] for x in names)
                                            for s in range(seeds)])
            summary[f"ledger {a.name} - {tag} best"] = _paired(runs[a.name], best)
    if all(("dense", s, "parallel") in results for s in range(seeds)):
        summary["data parallel (dense)"] = stats([results[("dense", s, "parallel")] for s in range(seeds)])
    return summary


def _cache_key(args, arm: Arm, seed: int, what: str) -> str:
    return json.dumps([args.model, args.participants, args.rounds, args.steps, args.smoke, args.gate,
                       arm.spec, arm.norms, arm.ramp, seed, what] + (["keepb"] if arm.keepb else []))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="charlm", choices=["charlm", *HF_SHAPES])
    ap.add_argument("--participants", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--ranks", default="4,16", help="adds arms lora-R=r=R, with their alone references")
    ap.add_argument("--arms", nargs="*", default=[], help="NAME=SPEC[|norms][|ramp=none|60][|keepb]")
    ap.add_argument("--alone", action="store_true", help="the alone-with-LoRA reference of every arm")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-gate", dest="gate", action="store_false",
                    help="evaluate only the last round's merges (every merge is taken)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached results")
    ap.add_argument("--cache", default="lora_quality_cache.json",
                    help="the results cache (one per concurrent run: each rewrites its own)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default="lora_quality.json")
    args = ap.parse_args()
    if args.smoke:
        args.participants, args.rounds, args.steps, args.seeds, args.ranks = 2, 1, 3, 1, "2"
    ranks = [int(r) for r in args.ranks.split(",") if r]
    arms = [Arm("dense", None)] + [Arm(f"lora-{r}", f"r={r}") for r in ranks] + [Arm.parse(t) for t in args.arms]
    alone_arms = {"dense", *(f"lora-{r}" for r in ranks), *((a.name for a in arms) if args.alone else ())}
    names = [f"p{i + 1}" for i in range(args.participants)]
    tasks = []
    for seed in range(args.seeds):
        for a in arms:
            tasks.append((a, seed, "ledger"))
            tasks += [(a, seed, f"alone:{x}") for x in names] if a.name in alone_arms else []
        if args.model == "charlm":  # the transformers workload has no data-parallel trainer in process
            tasks.append((arms[0], seed, "parallel"))
    cache_path, cache = RESULTS / args.cache, {}
    for other in [] if args.fresh else sorted(RESULTS.glob("lora_quality_cache*.json")):  # every run's results
        cache.update(json.loads(other.read_text()))
    results, cpu, todo = {}, {}, []
    for a, seed, what in tasks:
        key = _cache_key(args, a, seed, what)
        if key in cache:
            results[(a.name, seed, what)], cpu[(a.name, seed, what)] = cache[key]
        else:
            todo.append(((a.name, seed, what), args.model, args.participants, args.smoke, args.rounds, args.steps,
                         seed, a, what, args.gate))
    t0 = time.time()
    w = world(args.model, args.participants, args.smoke)  # the genesis built (and cached) once, before the pool
    by_name = {a.name: a for a in arms}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (name, seed, what), out, secs in pool.map(_task, todo):
            results[(name, seed, what)], cpu[(name, seed, what)] = out, secs
            cache[_cache_key(args, by_name[name], seed, what)] = [out, secs]
            RESULTS.mkdir(exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=0))  # a run stopped early keeps what it measured
            shown = out["final_loss"] if isinstance(out, dict) else out
            print(f"{name:<24} seed {seed} {what:<10} {shown:.4f}  [{secs:.0f} cpu-s, {time.time() - t0:.0f}s]",
                  flush=True)
    factor_values = {}
    for r in ranks:
        f, _ = trainer.train_lora(w.wl, dict(w.genesis), w.data(names[0], 0), 1, parse_lora(f"r={r}"))
        factor_values[r] = sum(A.numel() + B.numel() for A, B, _ in f.values())
    arm_cpu = {a.name: round(sum(v for k, v in cpu.items() if k[0] == a.name), 1) for a in arms}
    out = {"machine": machine(), "settings": vars(args), "genesis_loss": w.wl.evaluate(w.genesis, w.bench)["loss"],
           "factor_values_per_pr": factor_values, "dense_values_per_pr": sum(t.numel() for t in w.genesis.values()),
           "arms": {a.name: {"spec": a.spec, "norms": a.norms, "ramp": a.ramp} for a in arms},
           "cpu_seconds_per_arm": arm_cpu, "wall_seconds": round(time.time() - t0, 1),
           "summary": summarize(results, arms, args.seeds, names, alone_arms),
           "runs": {json.dumps(k): v for k, v in results.items()}}
    path = write_json(args.out, out)
    for k, v in out["summary"].items():
        print(f"{k:<44} {v['mean']:+.4f} ± {v['sd']:.4f}" if " - " in k else f"{k:<44} {v['mean']:.4f} ± {v['sd']:.4f}")
    print(f"cpu-seconds per arm (all its seeds and references): {arm_cpu}")
    print(path)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
