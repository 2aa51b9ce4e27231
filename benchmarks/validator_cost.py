"""What a PR costs a validator, against the PR's own training, on a ~135M transformers model (issue 50, item 4).

Usage:
    python benchmarks/validator_cost.py                  # SmolLM2-135M's shape, random init: hours on 2 shared cores
    python benchmarks/validator_cost.py --smoke          # a 2-layer Llama: the same stages in a few minutes
    python benchmarks/validator_cost.py --shape small --steps 4   # a ~5M Llama: compute-bound, ~10 minutes

The model is built here (nothing is downloaded): a Llama with SmolLM2-135M's shape (hidden 576, 30
layers, 9 heads, 3 KV heads, MLP 1536, vocabulary 49152, tied embeddings), random weights written as
safetensors, and a byte-level BPE tokenizer trained on the standard library's sources (as
examples/make_tiny_model.py does; up to 49152 tokens). A ledger of it (`woolf init --workload
transformers --weights DIR`, its defaults: context 128, batch 8, a 32 KiB benchmark, scoring samples
of 8 KiB) gets three PRs:

1. p1 trains ``--steps`` steps with `woolf train` (it has a recipe: with `validators.retrain_rate = 1`
   the validator re-trains it),
2. p2 trains ``--steps`` steps with the workload's own train() and submits the weights (no recipe),
3. p3 submits main's weights times 3 (a delta the gate refuses).

Each PR is judged twice against the same main: by a validator with `validators.eval = "full"` (what
every PR cost before: a fresh process per PR evaluates main again, timed apart as "main"; re-training
off) and by the real `Validator.validate_one` with the ledger's config (`"sequential"`, re-training
on), which records the verdict. Both decisions are compared. Per PR: the verdicts' timings by stage,
the tokens each evaluated, the process's CPU seconds (all threads: steadier than wall seconds on a
shared machine; the sequential judgment's include its re-training), and the peak RSS after each step. The ratios to the PR's own
training (the training loop's seconds, at ``--steps`` and, from its seconds per step, at 100 steps)
are printed side by side. Results go to benchmarks/results/validator_cost[_<shape>].json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, peak_rss_mib, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions

SPECIAL = "<|endoftext|>"
SHAPES = {  # name: (layers, hidden, heads, kv heads, mlp, vocabulary)
    "smollm2-135m": (30, 576, 9, 3, 1536, 49152),
    "small": (4, 256, 4, 2, 688, 8192),  # ~5M: compute outweighs the fixed costs, in minutes on 2 shared cores
    "smoke": (2, 64, 4, 2, 128, 4096),
}


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def make_tokenizer(vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if p.stat().st_size > 4000)[:400]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[SPECIAL], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((p.read_text(errors="replace") for p in files), trainer=trainer)
    return tok


def make_model(out: Path, shape: str) -> dict:
    """A random-init Llama of ``shape`` and its tokenizer in ``out`` (save_pretrained: safetensors)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    layers, hidden, heads, kv, mlp, vocab = SHAPES[shape]
    tok = make_tokenizer(vocab)
    eos = tok.token_to_id(SPECIAL)
    config = LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                         num_key_value_heads=kv, intermediate_size=mlp, vocab_size=vocab,
                         max_position_embeddings=2048, rope_theta=100000.0, rms_norm_eps=1e-5,
                         tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL, bos_token=SPECIAL).save_pretrained(out)
    return {"shape": shape, "params": sum(p.numel() for p in model.parameters()), "tokenizer_tokens":
            tok.get_vocab_size(), "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv, "mlp": mlp,
            "vocabulary": vocab}


def _clone(root: Path, name: str):
    from woolf.ledger.ledger import Ledger

    _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
    _git("config", "user.name", name, cwd=root / name)
    return Ledger.open(root / name)


def _direct(led, who: str, steps: int, seed: int) -> tuple[Path, dict]:
    """``steps`` of the workload's own train() from main (no recipe): the trained weights' file and summary."""
    from safetensors.torch import save_file

    head = led.pull()
    wl = led.workload()
    trained, summary = wl.train(led.load_weights(head), wl.default_data(who, head.version), steps, device="cpu",
                                seed=seed, in_place=True)
    path = led.root / "trained.safetensors"
    save_file(trained, path)
    return path, summary


def _scaled(led, factor: float) -> Path:
    """main's weights times ``factor``: a delta the gate refuses (sharper logits of a model that knows nothing)."""
    from safetensors.torch import save_file

    w = led.load_weights(led.pull())
    path = led.root / "scaled.safetensors"
    save_file({k: v * factor for k, v in w.items()}, path)
    return path


def judged_full(full, sub_id: str) -> dict:
    """PR ``sub_id`` judged by a fresh validator under `validators.eval = "full"` (re-training off), main's
    evaluation timed apart: what each PR cost before (one `woolf validate` process per PR)."""
    from woolf.timing import Timer
    from woolf.validator.ahead import cancel_ahead
    from woolf.validator.stages import evaluate_before
    from woolf.validator.state import ValidatorState
    from woolf.validator.step import evaluate, fresh

    ctx = full.ctx
    ctx.state = ValidatorState()
    pr, main = fresh(ctx, sub_id)
    ctx.ledger.config.validators.eval = "full"
    ctx.ledger.config.validators.retrain_rate = 0.0
    t_main, c0 = Timer(), time.process_time()
    weights = ctx.ledger.load_weights(main)
    evaluate_before(ctx, main, weights, t_main)
    del weights
    timer, c1 = Timer(), time.process_time()
    verdict, _ = evaluate(ctx, pr, main, timer)
    cancel_ahead(ctx)
    return {"accepted": verdict.accepted, "reason": verdict.reason, "timings": dict(timer),
            "main_evaluation": t_main.get("evaluation", 0.0), "cpu_main": round(c1 - c0, 2),
            "cpu": round(time.process_time() - c1, 2), "metrics": verdict.metrics, "scores": verdict.scores,
            "flags": verdict.flags, "peak_rss_mib": peak_rss_mib()}


def judged_sequential(val, sub_id: str) -> dict:
    c0 = time.process_time()
    v = val.validate_one(sub_id)
    return {"accepted": v.accepted, "reason": v.reason, "timings": dict(v.timings),
            "cpu": round(time.process_time() - c0, 2), "metrics": v.metrics,
            "scores": v.scores, "flags": v.flags, "retrain": v.retrain, "version": v.version,
            "peak_rss_mib": peak_rss_mib()}


def run(root: Path, shape: str, steps: int) -> dict:
    from woolf.ledger.ledger import Ledger
    from woolf.participant import SubmitOptions, TrainOptions, submit, train
    from woolf.validator import Validator

    t0 = time.perf_counter()
    model = make_model(root / "model", shape)
    print(f"model {model['params'] / 1e6:.1f}M parameters, tokenizer {model['tokenizer_tokens']} tokens "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    work = Ledger.init(root / "work", CreateOptions(
        storage=str(root / "storage"), workload="transformers", weights=root / "model",
        overrides={"validators.retrain_rate": "1.0", "limits.max_retrain_seconds": "86400"}))
    _git("clone", "-q", "--bare", str(work.root), str(root / "hub.git"), cwd=root)
    wl = work.workload()
    bench = work.benchmark()
    n, size = wl.windows(bench)
    print(f"ledger made ({time.perf_counter() - t0:.0f} s): benchmark {len(bench)} bytes, {n} windows of {size} "
          f"tokens", flush=True)
    val = Validator(_clone(root, "val"), device="cpu", name="sequential")
    full = Validator(_clone(root, "full"), device="cpu", name="full")
    rows = []
    for k, kind in enumerate(("woolf train", "train()", "scaled"), start=1):
        who = f"p{k}"
        led = _clone(root, who)
        row: dict = {"pr": k, "kind": kind}
        c0 = time.process_time()
        if kind == "woolf train":
            rec = train(led, TrainOptions(steps=steps, contributor=who, device="cpu", seed=k, task=False))
            row["training"] = rec["training"]
            sub = submit(led, SubmitOptions(contributor=who))
        elif kind == "train()":
            path, summary = _direct(led, who, steps, k)
            row["training"] = summary
            sub = submit(led, SubmitOptions(weights=path, base_version=led.head().version, contributor=who))
        else:
            sub = submit(led, SubmitOptions(weights=_scaled(led, 3.0), base_version=led.head().version,
                                            contributor=who))
        sub_id = sub["id"]
        if kind != "scaled":
            row["training_cpu"] = round(time.process_time() - c0, 2)  # training and submit: CPU seconds, all threads
        row["peak_rss_after_training_mib"] = peak_rss_mib()
        print(f"PR {k} ({kind}) submitted: {sub_id}; training {row.get('training', {}).get('seconds')} s", flush=True)
        row["full"] = judged_full(full, sub_id)
        print(f"  full:       {_line(row['full'])}", flush=True)
        row["sequential"] = judged_sequential(val, sub_id)
        print(f"  sequential: {_line(row['sequential'])}", flush=True)
        row["same_decision"] = row["full"]["accepted"] == row["sequential"]["accepted"]
        rows.append(row)
    return {"model": model, "benchmark_bytes": len(bench), "benchmark_windows": n, "window_tokens": size,
            "steps": steps, "prs": rows, "seconds": round(time.perf_counter() - t0, 1)}


def _line(j: dict) -> str:
    t = j["timings"]
    return (f"{'accept' if j['accepted'] else 'reject'}; " + ", ".join(f"{k} {v:.1f}" for k, v in t.items())
            + (f"; main {j['main_evaluation']:.1f}" if "main_evaluation" in j else "")
            + f"; peak RSS {j['peak_rss_mib']:.0f} MiB; {j['reason'][:160]}")


def ratios(out: dict) -> list[dict]:
    """Per PR: evaluation, scoring and re-training seconds over the PR's own training, at the run's steps and
    at 100 steps (its seconds per step times 100), before (full) and now (sequential)."""
    per_step = [r["training"]["seconds"] / r["training"]["steps"] for r in out["prs"] if "training" in r]
    step_s = sum(per_step) / len(per_step)
    table = []
    for r in out["prs"]:
        f, s = r["full"]["timings"], r["sequential"]["timings"]
        before_long = f.get("evaluation", 0) + f.get("scoring", 0)
        before_fresh = before_long + r["full"]["main_evaluation"]
        now = s.get("evaluation", 0) + s.get("scoring", 0)
        row = {"pr": r["pr"], "kind": r["kind"], "decision": "accept" if r["sequential"]["accepted"] else "reject",
               "same_decision": r["same_decision"], "train_seconds_per_step": round(step_s, 2)}
        for steps in (out["steps"], 100):
            train_s = step_s * steps
            row[f"x{steps}"] = {"before_per_pr_process": round(before_fresh / train_s, 3),
                                "before_long_running": round(before_long / train_s, 3),
                                "now": round(now / train_s, 3),
                                "retrain": round(s.get("retrain", 0) / train_s, 3)}
        table.append(row)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="a 2-layer Llama instead of SmolLM2-135M's shape")
    ap.add_argument("--shape", choices=sorted(SHAPES), default=None, help="overrides --smoke")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    shape = a.shape or ("smoke" if a.smoke else "smollm2-135m")
    start = __import__("os").getloadavg()
    with tempfile.TemporaryDirectory(prefix="woolf-vcost-", dir=a.workdir) as tmp:
        out = run(Path(tmp), shape, a.steps)
    out["machine"] = machine()
    out["load_average"] = {"start": start, "end": __import__("os").getloadavg()}
    out["ratios"] = ratios(out)
    for r in out["ratios"]:
        print(json.dumps(r), flush=True)
    name = a.out or ("validator_cost.json" if shape == "smollm2-135m" else f"validator_cost_{shape}.json")
    print(f"wrote {write_json(name, out)} in {out['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
