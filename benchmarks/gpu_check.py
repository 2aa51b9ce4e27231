"""The transformers workload on one GPU, in one prepared run of at most 10 minutes (benchmarks §14).

Usage:
    python benchmarks/gpu_check.py                      # the prepared run (H200: ~9 min, --budget 540)
    python benchmarks/gpu_check.py --train-sizes 124M --ledger-sizes "" --steps 10
    python benchmarks/gpu_check.py --lora r=16          # also the LoRA route (issue 33's API, when present)
    python benchmarks/gpu_check.py --cpu-smoke          # every code path on the CPU with a tiny model

Stages, each bounded by what is left of ``--budget`` (a stage estimated not to fit is recorded as
skipped) and the result file (``--out``, under benchmarks/results/) written after each:

1. matmul: the device's measured bf16 matrix-multiply rate (8192^3, after a warm-up): the
   reference for model FLOP/s utilization (MFU = 6 * parameters * tokens/s / that rate).
2. train, per ``--train-sizes`` (GPT-2 shapes 124M, 355M, 774M, 1.5B; random weights, a
   512-token tokenizer trained locally; nothing is downloaded): a plain, well-written PyTorch
   loop (the same transformers model, fused AdamW, SDPA attention, bf16 autocast, float32
   masters, gradient clipping, no host syncs until the end) side by side with
   ``Transformers.train`` on the same batch and precision: tokens/s of each, their ratio
   (the target is >= 0.8), MFU of each, and each one's peak device memory. ``--lora SPEC``
   adds the workload's LoRA training (issue 33) when this checkout has it.
3. ledger, per ``--ledger-sizes``: init; the floor (``cp`` + ``md5sum`` of version 0's object
   in storage, measured in this run); ``--prs`` participants train and submit; one validator
   pass (``Validator.run``) over them: per PR, the validator's own work (its timings less
   evaluation and scoring) against the floor (issue 35's target: median <= 2x); md5 + sha256 of
   the object in one stream against 8 shards at once (one DVC object per version?); peak device
   memory; the same version's loss evaluated on the CPU, on the device in float32, with TF32
   matmuls and under bf16 autocast, each difference set against ``validators.epsilon``.

4. proof of training across devices (benchmarks/retrain_devices.py): segments of a charlm run committed
   on the device and replayed on the device itself (bit for bit?), on the CPU, and the reverse: the
   per-segment distance ``validators.retrain_tolerance`` (0.02 by default) must allow across classes.

``--cpu-smoke`` (alias ``--dry-run``) runs every stage on the CPU with a 2-layer model and a
small matmul, to prove the script where no GPU is lent; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import floor, machine, write_json  # noqa: E402
from hf_throughput import _tiny  # noqa: E402
from validator_floor import hashing  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions, TrainOptions

SIZES = {"tiny": (2, 64, 1024), "124M": (12, 768, 50257), "355M": (24, 1024, 50257),
         "774M": (36, 1280, 50257), "1.5B": (48, 1600, 50257)}
# rough seconds per stage on an H200 per 1e8 parameters, plus a fixed part: what decides a skip
COST = {"train": (10, 6), "ledger": (30, 25)}


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def build_model(root: Path, layers: int, width: int, vocab: int, context: int, weights: bool = True) -> Path:
    """A GPT-2 directory: config.json and tokenizer.json, and (``weights``) random bf16 weights."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, PreTrainedTokenizerFast

    mod = _tiny()
    out = root / "model"
    tok = mod.make_tokenizer(512)
    eos = tok.token_to_id(mod.SPECIAL)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(2, width // 64), n_positions=context,
                        vocab_size=vocab, bos_token_id=eos, eos_token_id=eos)
    if weights:
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(out)
    else:
        out.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(out)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=mod.SPECIAL, bos_token=mod.SPECIAL).save_pretrained(out)
    return out


def matmul_rate(device: str, smoke: bool) -> dict:
    """Measured dense matmul FLOP/s: bf16 8192^3 on CUDA (float32 256^3 in the smoke run)."""
    import torch

    n, dtype = (256, torch.float32) if smoke else (8192, torch.bfloat16)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    reps = 5 if smoke else 50
    for _ in range(3):
        a @ b
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(device)
    secs = time.perf_counter() - t0
    return {"n": n, "dtype": str(dtype).replace("torch.", ""), "flops_per_second": 2 * n**3 * reps / secs}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _reset(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if device.startswith("cuda") else None


def bound_workload(model: Path, a):
    """The transformers workload over a model directory, as a ledger would configure it (no ledger)."""
    from woolf.workloads.hf import Transformers

    files = {n: hashlib.sha256((model / n).read_bytes()).hexdigest() for n in ("config.json", "tokenizer.json")}
    wl = Transformers(files=files, context=a.context, batch_size=a.batch, lr=1e-5,
                      autocast="bf16" if a.device == "cuda" else "", compile=a.compile,
                      checkpointing=a.checkpointing)
    wl.bind(lambda rel: (model / Path(rel).name).read_bytes())
    return wl


def plain_loop(wl, ids, steps: int, device: str, compile: bool) -> dict:
    """The reference: a plain PyTorch loop on the same model, batch and precision as the workload's."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(wl.config, dtype=torch.float32).to(device).train()
    cuda = device.startswith("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True if cuda else None)
    fwd = torch.compile(model) if compile else model
    tokens = ids.to(device)
    span = torch.arange(wl.context + 1, device=device)
    amp = torch.bfloat16 if cuda else None

    def step():
        rows = torch.randint(len(ids) - wl.context - 1, (wl.batch_size,), device=device)
        window = tokens[rows[:, None] + span]
        with torch.autocast(torch.device(device).type, dtype=amp or torch.float32, enabled=amp is not None):
            logits = fwd(input_ids=window[:, :-1]).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):  # warm-up: kernels, allocator, compilation
        step()
    _reset(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    secs = time.perf_counter() - t0
    peak = _peak(device)
    _reset(device)
    return {"seconds": round(secs, 3), "tokens_per_second": steps * wl.batch_size * wl.context / secs,
            "peak_device_mib": peak}


def workload_loop(wl, steps: int, device: str) -> dict:
    """``Transformers.train`` (in place, as `woolf train` calls it) on the same model, batch and precision."""
    w0 = wl.genesis(0)
    data = wl.default_data("alice", 0)
    wl.train(w0, data, steps=2, device=device, in_place=True)  # warm-up
    _reset(device)
    _, summary = wl.train(w0, data, steps=steps, device=device, in_place=True)
    peak = _peak(device)
    del w0
    wl._model = None
    _reset(device)
    return {"seconds": summary["seconds"], "tokens_per_second": summary["tokens"] / max(summary["seconds"], 1e-9),
            "peak_device_mib": peak, "autocast": summary["autocast"]}


def lora_loop(wl, spec: str, steps: int, device: str) -> dict:
    """The workload's LoRA training (issue 33), when this checkout has it."""
    try:
        from woolf.protocol.lora_spec import parse_lora
    except ImportError:
        return {"skipped": "this checkout has no LoRA training (issue 33 not merged)"}
    if not hasattr(wl, "train_lora"):
        return {"skipped": "Transformers.train_lora is missing"}
    w0 = wl.genesis(0)
    data = wl.default_data("alice", 0)
    _reset(device)
    t0 = time.perf_counter()
    wl.train_lora(w0, data, steps, parse_lora(spec), device=device)
    _sync(device)
    secs = time.perf_counter() - t0
    return {"spec": spec, "seconds": round(secs, 3), "peak_device_mib": _peak(device),
            "tokens_per_second": steps * wl.batch_size * wl.context / secs}


def train_stage(root: Path, name: str, a, rate: float) -> dict:
    layers, width, vocab = SIZES[name]
    wl = bound_workload(build_model(root, layers, width, vocab, a.context, weights=False), a)
    params = sum(p.numel() for p in wl.model().parameters())
    wl._model = None
    ids = wl.tokens(wl.default_data("alice", 0).texts)
    plain = plain_loop(wl, ids, a.steps, a.device, a.compile)
    ours = workload_loop(wl, a.steps, a.device)
    for row in (plain, ours):
        row["mfu"] = round(6 * params * row["tokens_per_second"] / rate, 4)
    row = {"size": name, "params": params, "batch": a.batch, "context": a.context, "plain_loop": plain,
           "workload": ours, "workload_over_plain": round(ours["tokens_per_second"] / plain["tokens_per_second"], 3)}
    if a.lora:
        row["lora"] = lora_loop(wl, a.lora, a.steps, a.device)
    return row


def ledger_stage(root: Path, name: str, a) -> dict:
    from woolf.ledger.ledger import Ledger

    layers, width, vocab = SIZES[name]
    model = build_model(root, layers, width, vocab, a.context)
    t0 = time.perf_counter()
    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers", weights=model,
                       overrides={"policy.min_improvement": "-1e9", "scoring.min_effect": "0",
                                  "workload.params.context": str(a.context),
                                  "workload.params.batch_size": str(a.batch),
                                  "workload.params.autocast": "bf16" if a.device == "cuda" else "",
                                  "workload.params.benchmark_bytes": str(a.benchmark_bytes),
                                  "workload.params.lr": "1e-5"}))
    init_s = time.perf_counter() - t0
    shutil.rmtree(model)
    obj = max((p for p in (root / "storage").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    floors = [floor(obj, root / "floor.tmp")]
    _git("clone", "-q", "--bare", str(work.root), str(root / "hub.git"), cwd=root)
    row = {"size": name, "init_seconds": round(init_s, 2), "prs": a.prs}
    row.update(_prs_and_pass(root, a))
    floors.append(floor(obj, root / "floor.tmp"))  # again after the pass: the machine's state moves
    row["floor"] = {"samples": floors, "seconds": min(f["seconds"] for f in floors)}
    row["hashing"] = hashing(obj, 8)  # one stream vs 8 shards at once: one DVC object per version? (protocol.md)
    own = [p["own_work"] for p in row["validate"]["per_pr"]]
    row["validate"]["own_work_median"] = statistics.median(own)
    row["validate"]["own_work_over_floor"] = round(statistics.median(own) / row["floor"]["seconds"], 2)
    row["evaluation_precision"] = _precision(root, a.device)
    return row


def _prs_and_pass(root: Path, a) -> dict:
    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit, train
    from woolf.validator import Validator

    submits = []
    for i in range(a.prs):
        who = f"p{i}"
        _git("clone", "-q", str(root / "hub.git"), str(root / who), cwd=root)
        _git("config", "user.name", who, cwd=root / who)
        led = Ledger.open(root / who)
        train(led, TrainOptions(steps=2, contributor=who, device=a.device, seed=i))
        t0 = time.perf_counter()
        submit(led, SubmitOptions(contributor=who))
        submits.append(round(time.perf_counter() - t0, 2))
        shutil.rmtree(root / who)
    _git("clone", "-q", str(root / "hub.git"), str(root / "val"), cwd=root)
    _git("config", "user.name", "val", cwd=root / "val")
    val = Ledger.open(root / "val")
    _reset(a.device)
    t0 = time.perf_counter()
    verdicts = Validator(val, device=a.device).run()
    pass_s = time.perf_counter() - t0
    per_pr = []
    for v in verdicts:
        t = dict(v.timings or {})
        own = sum(t.values()) - t.get("evaluation", 0.0) - t.get("scoring", 0.0)
        per_pr.append({"id": v.id, "state": v.state, "timings": t, "own_work": round(own, 3)})
    return {"submit_seconds": submits,
            "validate": {"pass_seconds": round(pass_s, 2), "per_pr": per_pr, "peak_device_mib": _peak(a.device),
                         "device_recorded": verdicts[0].device if verdicts else None}}


def _precision(root: Path, device: str) -> dict:
    """Version 1's loss on the CPU and on the device in float32, TF32 and bf16, against validators.epsilon."""
    import torch

    from woolf.ledger.ledger import Ledger

    val = Ledger.open(root / "val")
    wl, bench = val.workload(), val.benchmark()
    w1 = val.load_weights(val.head())
    out = {"epsilon": val.config.validators.epsilon, "cpu": wl.evaluate(w1, bench, "cpu")["loss"]}
    out["float32"] = wl.evaluate(w1, bench, device)["loss"]
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        out["tf32"] = wl.evaluate(w1, bench, device)["loss"]
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out["bf16"] = wl.evaluate(w1, bench, device)["loss"]
    out["differences"] = {k: abs(out[k] - out["cpu"]) for k in ("float32", "tf32", "bf16") if k in out}
    out["within_epsilon"] = {k: d <= out["epsilon"] for k, d in out["differences"].items()}
    return out


def _fits(stage: str, name: str, deadline: float, smoke: bool) -> bool:
    if smoke:
        return True
    per, fixed = COST[stage]
    layers, width, vocab = SIZES[name]
    params = layers * 12 * width * width + vocab * width
    return time.monotonic() + fixed + per * params / 1e8 <= deadline


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-sizes", default="124M,355M,774M,1.5B", help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--ledger-sizes", default="124M,774M", help="sizes for the ledger stage (init, PRs, validate)")
    ap.add_argument("--prs", type=int, default=3, help="PRs validated in one pass at each ledger size")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--benchmark-bytes", type=int, default=65536)
    ap.add_argument("--compile", action="store_true", help="torch.compile both loops")
    ap.add_argument("--checkpointing", action="store_true", help="the workload with gradient checkpointing")
    ap.add_argument("--lora", default="", help="also the workload's LoRA training with this spec, e.g. r=16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=540, help="seconds for all stages (a stage that would not fit is skipped)")
    ap.add_argument("--cpu-smoke", "--dry-run", dest="smoke", action="store_true",
                    help="every stage on the CPU with a tiny model; proves the script, measures nothing")
    ap.add_argument("--out", default="gpu_check.json")
    a = ap.parse_args()
    names = [s for s in (a.train_sizes + "," + a.ledger_sizes).split(",") if s]
    bad = [s for s in names if s not in SIZES]
    if bad:
        raise SystemExit(f"sizes {bad} are not of {', '.join(SIZES)}")
    if a.smoke:
        a.train_sizes = a.ledger_sizes = "tiny"
        a.device, a.steps, a.context, a.batch, a.benchmark_bytes, a.prs = "cpu", 2, 32, 2, 3000, min(a.prs, 2)
    return a


def main() -> None:
    a = _parse()
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --cpu-smoke for the CPU smoke path")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    deadline = time.monotonic() + a.budget
    result = {"machine": machine(), "smoke": a.smoke, "args": vars(a),
              "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else None,
              "matmul": matmul_rate(a.device, a.smoke), "train": [], "ledger": []}
    path = write_json(a.out, result)
    rate = result["matmul"]["flops_per_second"]
    print(f"matmul: {rate / 1e12:.1f} TFLOP/s ({result['matmul']['dtype']})", flush=True)
    stages = [("train", s) for s in a.train_sizes.split(",") if s] + \
             [("ledger", s) for s in a.ledger_sizes.split(",") if s]
    for stage, name in stages:
        t0 = time.perf_counter()
        if not _fits(stage, name, deadline, a.smoke):
            row = {"size": name, "skipped": f"not enough of --budget {a.budget:.0f} s left"}
        else:
            with tempfile.TemporaryDirectory(prefix=f"woolf-gpu-{name}-") as tmp:
                try:
                    row = (train_stage(Path(tmp), name, a, rate) if stage == "train"
                           else ledger_stage(Path(tmp), name, a))
                except Exception as exc:  # noqa: BLE001 - out of memory at the largest size: recorded, not fatal
                    row = {"size": name, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        row["wall_seconds"] = round(time.perf_counter() - t0, 1)
        result[stage].append(row)
        path = write_json(a.out, result)  # after every stage: a cut-short run keeps what it measured
        print(f"{stage} {name}: {json.dumps(row)[:600]}", flush=True)
    path = write_json(a.out, {**result, "retrain_across_devices": retrain_stage(a)})
    print(f"wrote {path}")


def retrain_stage(a) -> list[dict] | dict:
    """Proof of training across devices: a charlm run committed on the device and each segment replayed on
    the CPU, the reverse, and the device against itself (bit for bit within a device class? the per-segment
    distance validators.retrain_tolerance must allow across classes; benchmarks/retrain_devices.py). The CPU
    smoke compares the CPU with itself. Written and run on the CPU only: no GPU was lent."""
    from retrain_devices import cross_device

    try:
        if a.smoke:
            return cross_device("cpu", "cpu", 1, 4, every=2)
        return (cross_device(a.device, a.device) + cross_device(a.device, "cpu")
                + cross_device("cpu", a.device))
    except Exception as exc:  # noqa: BLE001 - recorded, like every stage
        return {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}


if __name__ == "__main__":
    main()
