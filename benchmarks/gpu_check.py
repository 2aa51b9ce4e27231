"""The transformers workload on a GPU, in one run: what the first lent GPU should measure (benchmarks §14).

Usage:
    python benchmarks/gpu_check.py                          # GPT-2 shapes 124M, 355M, 774M on cuda
    python benchmarks/gpu_check.py --sizes 124M --steps 10 --out gpu_check.json
    python benchmarks/gpu_check.py --dry-run                # the CPU smoke path: a tiny model, no GPU needed
    python benchmarks/gpu_check.py --lora 16                # issue 33: GPT-2 1.5B, LoRA r=16, device capped at 24 GiB
    python benchmarks/gpu_check.py --lora 4 --dry-run       # its CPU smoke path

For each size (random GPT-2 weights saved in bfloat16, a 512-token tokenizer trained
locally; nothing is downloaded): a ledger (float32 masters), then on the device

- train: ``--steps`` AdamW steps with bf16 autocast; tokens/s (the first step, which
  compiles kernels, is excluded by a warm-up run);
- evaluation: ``Transformers.evaluate`` of the trained weights; tokens/s;
- validate: one PR through ``Validator(device=...)``; the seconds beyond its evaluations
  and scoring (load, checks, merge, upload, push), and the verdict's own timings;
- peak device memory (``torch.cuda.max_memory_allocated``) over train and over validate;
- CPU vs CUDA: the same version's loss evaluated on the CPU and on the device (what
  ``validators.epsilon``, 1e-3 by default, must allow).

``--lora R`` (issue 33; default size 1.5B): the device is capped at 24 GiB
(``torch.cuda.set_per_process_memory_fraction``), as a participant's consumer GPU would be;
``woolf train --lora r=R`` (peft adapters over the version frozen in bf16) -> ``woolf submit``
(the factor file) -> ``Validator(device="cuda")`` merges it; recorded: peak device memory of
training and of validation, training tokens/s, the PR's bytes against the dense float32 delta.

It writes the result file as it goes (``--out``, under benchmarks/results/), so a run cut
short by a time limit keeps what it measured. ``--dry-run`` runs every step on the CPU with
a 2-layer model, to prove the script before a GPU is lent.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402
from hf_throughput import _tiny  # noqa: E402

SIZES = {"tiny": (2, 64, 1024), "124M": (12, 768, 50257), "355M": (24, 1024, 50257),
         "774M": (36, 1280, 50257), "1.5B": (48, 1600, 50257)}


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def build_model(root: Path, layers: int, width: int, vocab: int, context: int) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, PreTrainedTokenizerFast

    mod = _tiny()
    out = root / "model"
    tok = mod.make_tokenizer(512)
    eos = tok.token_to_id(mod.SPECIAL)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(2, width // 64), n_positions=context,
                        vocab_size=vocab, bos_token_id=eos, eos_token_id=eos)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(out)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=mod.SPECIAL, bos_token=mod.SPECIAL).save_pretrained(out)
    return out


def one_size(root: Path, name: str, device: str, steps: int, context: int, batch: int, bench_bytes: int) -> dict:
    import torch

    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit, train
    from woolf.validator import Validator

    layers, width, vocab = SIZES[name]
    model = build_model(root, layers, width, vocab, context)
    t0 = time.perf_counter()
    work = Ledger.init(root / "work", storage=str(root / "storage"), workload="transformers", weights=model,
                       overrides={"policy.min_improvement": "-1e9", "scoring.min_effect": "0",
                                  "workload.params.context": str(context),
                                  "workload.params.batch_size": str(batch),
                                  "workload.params.autocast": "bf16" if device == "cuda" else "",
                                  "workload.params.benchmark_bytes": str(bench_bytes),
                                  "workload.params.lr": "1e-5"})
    init_s = time.perf_counter() - t0
    _git("clone", "-q", "--bare", str(work.root), str(root / "hub.git"), cwd=root)
    for who in ("alice", "val"):
        _git("clone", "-q", str(root / "hub.git"), str(root / who), cwd=root)
        _git("config", "user.name", who, cwd=root / who)
    alice, val = Ledger.open(root / "alice"), Ledger.open(root / "val")
    wl = alice.workload()
    w0 = alice.load_weights(alice.head("refs/remotes/origin/main"))
    params = sum(v.numel() for v in w0.values())
    cuda = device == "cuda"

    def reset():
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def peak():
        return round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None

    data = wl.default_data("alice", 0)
    wl.train(w0, data, steps=1, device=device)  # warm-up: kernels, allocator
    reset()
    trained, summary = wl.train(w0, data, steps=steps, device=device)
    train_peak = peak()
    bench = alice.benchmark()
    wl.evaluate(trained, bench, device)  # warm-up
    t0 = time.perf_counter()
    metrics_dev = wl.evaluate(trained, bench, device)
    eval_s = time.perf_counter() - t0
    eval_tokens = (len(wl.tokens([bench])) - 1) // wl.context * wl.context
    del trained
    train(alice, steps=steps, contributor="alice", device=device)
    t0 = time.perf_counter()
    submit(alice, contributor="alice")
    submit_s = time.perf_counter() - t0
    reset()
    t0 = time.perf_counter()
    (verdict,) = Validator(val, device=device).run()
    validate_s = time.perf_counter() - t0
    validate_peak = peak()
    assert verdict.accepted, verdict.reason
    timings = dict(verdict.timings or {})
    v1 = val.load_weights(val.show(1))
    vwl = val.workload()
    cpu_loss = vwl.evaluate(v1, bench, "cpu")["loss"]
    dev_loss = vwl.evaluate(v1, bench, device)["loss"]
    return {"size": name, "params": params, "layers": layers, "width": width, "vocab": vocab, "device": device,
            "init_seconds": round(init_s, 2),
            "train": {"steps": steps, "tokens": summary["tokens"], "seconds": summary["seconds"],
                      "tokens_per_second": summary["tokens"] / max(summary["seconds"], 1e-9),
                      "autocast": summary["autocast"], "peak_device_mib": train_peak},
            "evaluation": {"tokens": eval_tokens, "seconds": round(eval_s, 3),
                           "tokens_per_second": eval_tokens / max(eval_s, 1e-9), "loss": metrics_dev["loss"]},
            "submit_seconds": round(submit_s, 2),
            "validate": {"seconds": round(validate_s, 2), "timings": timings,
                         "beyond_evaluation_and_scoring": round(
                             validate_s - timings.get("evaluation", 0.0) - timings.get("scoring", 0.0), 2),
                         "peak_device_mib": validate_peak, "device_recorded": verdict.device},
            "cpu_vs_device_loss": {"cpu": cpu_loss, "device": dev_loss, "difference": abs(cpu_loss - dev_loss)}}


def one_size_lora(root: Path, name: str, device: str, steps: int, context: int, batch: int, bench_bytes: int,
                  rank: int) -> dict:
    """``--lora``: train -> submit -> validate of a LoRA contribution (see the module docstring)."""
    import torch

    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit, train
    from woolf.storage.lora import dense_bytes
    from woolf.storage.weights import TRUSTED_LIMITS, read_spec
    from woolf.validator import Validator

    layers, width, vocab = SIZES[name]
    model = build_model(root, layers, width, vocab, context)
    Ledger.init(root / "work", storage=str(root / "storage"), workload="transformers", weights=model,
                overrides={"policy.min_improvement": "-1e9", "scoring.min_effect": "0",
                           "workload.params.context": str(context), "workload.params.batch_size": str(batch),
                           "workload.params.benchmark_bytes": str(bench_bytes), "workload.params.lr": "1e-4"})
    _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
    for who in ("alice", "val"):
        _git("clone", "-q", str(root / "hub.git"), str(root / who), cwd=root)
        _git("config", "user.name", who, cwd=root / who)
    alice, val = Ledger.open(root / "alice"), Ledger.open(root / "val")
    spec = read_spec(alice.weights_path(alice.head("refs/remotes/origin/main")), TRUSTED_LIMITS)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = train(alice, steps=steps, contributor="alice", device=device, lora=f"r={rank}")
    train_peak = round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None
    pr = submit(alice, contributor="alice")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    (verdict,) = Validator(val, device=device).run()
    validate_s = time.perf_counter() - t0
    s = t["training"]
    return {"size": name, "lora": t["lora"], "device": device, "params": sum(math.prod(x) for _, x in spec.values()),
            "train": {"steps": steps, "tokens": s["tokens"], "seconds": s["seconds"],
                      "tokens_per_second": s["tokens"] / max(s["seconds"], 1e-9), "lora": s.get("lora"),
                      "peak_device_mib": train_peak},
            "pr": {"kind": pr["delta_kind"], "bytes": pr["delta_size"], "dense_f32_bytes": dense_bytes(spec),
                   "ratio": pr["delta_size"] / dense_bytes(spec)},
            "validate": {"state": verdict.state, "reason": verdict.reason, "seconds": round(validate_s, 2),
                         "peak_device_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
                         "device_recorded": verdict.device}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="124M,355M,774M", help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--benchmark-bytes", type=int, default=65536)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="the CPU smoke path: a tiny model, a few steps")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--lora", type=int, default=0, metavar="R",
                    help="LoRA rank: train -> submit -> validate a LoRA PR with the device capped at 24 GiB")
    ap.add_argument("--cap-gib", type=float, default=24.0, help="with --lora: the device memory cap")
    a = ap.parse_args()
    if a.lora and a.sizes == ap.get_default("sizes"):
        a.sizes = "1.5B"
    sizes = a.sizes.split(",")
    for s in sizes:
        if s not in SIZES:
            raise SystemExit(f"--sizes: {s!r} is not one of {', '.join(SIZES)}")
    if a.dry_run:
        sizes, a.device, a.steps, a.context, a.batch, a.benchmark_bytes = ["tiny"], "cpu", 2, 32, 2, 3000
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --dry-run for the CPU smoke path")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.lora and a.device == "cuda":  # a 24 GB consumer card, on whatever GPU was lent
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gib * 2**30 / total))
    result = {"machine": machine(), "dry_run": a.dry_run, "args": vars(a),
              "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else None, "rows": [],
              "cap_gib": a.cap_gib if a.lora else None}
    for name in sizes:
        with tempfile.TemporaryDirectory(prefix=f"woolf-gpu-{name}-") as tmp:
            t0 = time.perf_counter()
            try:
                if a.lora:
                    row = one_size_lora(Path(tmp), name, a.device, a.steps, a.context, a.batch, a.benchmark_bytes,
                                        a.lora)
                else:
                    row = one_size(Path(tmp), name, a.device, a.steps, a.context, a.batch, a.benchmark_bytes)
            except Exception as exc:  # noqa: BLE001 - out of memory at the largest size: recorded, not fatal
                row = {"size": name, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
            row["wall_seconds"] = round(time.perf_counter() - t0, 1)
        result["rows"].append(row)
        path = write_json(a.out, result)  # after every size: a cut-short run keeps what it measured
        print(f"{name}: {row}", flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
