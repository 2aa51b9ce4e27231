"""A LoRA contribution on a 24 GB budget: GPT-2 1.5B or a 7B Llama shape, train -> submit -> validate on CUDA (§17).

Usage:
    python benchmarks/gpu_lora.py                          # GPT-2 1.5B, r = 16, device capped at 24 GiB
    python benchmarks/gpu_lora.py --size 774M --rank 8 --steps 10
    python benchmarks/gpu_lora.py --size 7b                # a 6.74B Llama shape (Llama-2-7B's), bf16 checkpoint,
                                                           # the ledger evaluating in bf16; 24 GiB cap
    python benchmarks/gpu_lora.py --size 7b --lora "r=16,base=nf4"   # QLoRA (needs bitsandbytes on the machine)
    python benchmarks/gpu_lora.py --dry-run                # the CPU smoke path: a tiny model, no GPU needed
    python benchmarks/gpu_lora.py --dry-run --size tiny-llama   # the 7B stage's path on a tiny Llama, on the CPU

The device is capped at ``--cap-gib`` (default 24) with ``torch.cuda.set_per_process_memory_fraction``,
as a participant's consumer GPU would be. Random GPT-2 weights saved in bf16 (``gpu_check.build_model``;
nothing downloaded), a ledger of float32 masters, then ``woolf train --lora r=R`` (peft adapters over the
version frozen in bf16), ``woolf submit`` (the factor file), ``Validator(device="cuda")`` merging it.
Recorded: peak device memory of training and of validation, training tokens/s, the PR's bytes against
the dense float32 delta. (``gpu_check.py --lora SPEC`` times the workload's LoRA loop beside the others.)
The 7B stage (``--size 7b``, a Llama shape from lora_memory.py's ``LLAMAS``): random weights saved in bf16
on the host (13.5 GB), `woolf init` with ``workload.params.eval_dtype=bfloat16`` (a float32 evaluation of
7B is 27 GB: over the cap; participant and validator then measure alike, in bf16), scoring off (its six
evaluations are time, not memory). Host RAM: the init holds the float32 masters (27 GB) and the
validator too (1x float32 + its bf16 evaluation copy goes to the device, not the host); the
participant holds no model on the host (its base is read a tensor at a time straight to the device).
Expected device peaks at 7B: training 13.5 GB of bf16 base + activations (checkpointed) + adapters,
~15-17 GB; validation 13.5 GB (its bf16 evaluation model) + activations. Not run on a GPU yet: none was
lent to the sessions that wrote it (the tiny-Llama dry run exercises the same path on the CPU).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402
from gpu_check import SIZES, _git, build_model  # noqa: E402
from lora_memory import LLAMAS, TINY_LLAMA, build_llama  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions, TrainOptions


def one_size_lora(root: Path, name: str, device: str, steps: int, context: int, batch: int, bench_bytes: int,
                  rank: int, lora: str = "") -> dict:
    """``--lora``: train -> submit -> validate of a LoRA contribution (see the module docstring)."""
    import torch

    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit, train
    from woolf.storage.kinds.lora_file import dense_bytes
    from woolf.storage.weights import TRUSTED_LIMITS, read_spec
    from woolf.validator import Validator

    llama = name in LLAMAS or name == "tiny-llama"
    if llama:  # the 7B stage: a Llama shape, the ledger evaluating in bf16 (see the module docstring)
        model = build_llama(root, context, LLAMAS.get(name, TINY_LLAMA))
    else:
        layers, width, vocab = SIZES[name]
        model = build_model(root, layers, width, vocab, context)
    Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers", weights=model,
                overrides={"policy.min_improvement": "-1e9", "scoring.min_effect": "0",
                           "workload.params.context": str(context), "workload.params.batch_size": str(batch),
                           "workload.params.benchmark_bytes": str(bench_bytes), "workload.params.lr": "1e-4",
                           "limits.max_delta_bytes": str(64 * 2**30),  # 7B: a 27 GB float32 ledger
                           **({"workload.params.eval_dtype": "bfloat16", "scoring.enabled": "false"}
                              if llama else {})}))
    import shutil

    shutil.rmtree(model)  # host disk: the checkpoint is in the ledger now
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
    t = train(alice, TrainOptions(steps=steps, contributor="alice", device=device, lora=lora or f"r={rank}"))
    train_peak = round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None
    pr = submit(alice, SubmitOptions(contributor="alice"))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    (verdict,) = Validator(val, device=device).run()
    validate_s = time.perf_counter() - t0
    s = t["training"]
    return {"size": name, "lora": t["lora"], "device": device, "params": sum(math.prod(x) for _, x in spec.values()),
            "train": {"steps": steps, "tokens": s["tokens"], "seconds": s["seconds"],
                      "tokens_per_second": s["tokens"] / max(s["seconds"], 1e-9), "lora": s.get("lora"),
                      "peak_device_mib": train_peak, "metrics": t["metrics"], "gate": t["gate"]},
            "pr": {"kind": pr["delta_kind"], "bytes": pr["delta_size"], "dense_f32_bytes": dense_bytes(spec),
                   "ratio": pr["delta_size"] / dense_bytes(spec)},
            "validate": {"state": verdict.state, "reason": verdict.reason, "seconds": round(validate_s, 2),
                         "peak_device_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
                         "device_recorded": verdict.device}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1.5B", help=f"one of {', '.join([*SIZES, *LLAMAS, 'tiny-llama'])}")
    ap.add_argument("--lora", default="", help="the --lora text (default r=RANK), e.g. r=16,base=nf4")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--benchmark-bytes", type=int, default=65536)
    ap.add_argument("--cap-gib", type=float, default=24.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry-run", action="store_true", help="the CPU smoke path: a tiny model, 2 steps")
    ap.add_argument("--out", default="gpu_lora.json")
    a = ap.parse_args()
    if a.dry_run:
        a.size = "tiny-llama" if a.size in LLAMAS or a.size == "tiny-llama" else "tiny"
        a.device, a.steps, a.context, a.batch, a.benchmark_bytes, a.rank = "cpu", 2, 32, 2, 3000, 4
    elif a.size in LLAMAS and a.steps == 20:  # a 7B stage within the device time a lent GPU gives
        a.steps, a.context, a.batch, a.benchmark_bytes = 5, 512, 4, 8192
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --dry-run for the CPU smoke path")
    if a.device == "cuda":  # a 24 GB consumer card, on whatever GPU was lent
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gib * 2**30 / total))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = {"machine": machine(), "args": vars(a), "cap_gib": a.cap_gib,
              "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else None}
    with tempfile.TemporaryDirectory(prefix="woolf-gpu-lora-") as tmp:
        t0 = time.perf_counter()
        try:
            result["row"] = one_size_lora(Path(tmp), a.size, a.device, a.steps, a.context, a.batch,
                                          a.benchmark_bytes, a.rank, a.lora)
        except Exception as exc:  # noqa: BLE001 - out of memory under the cap: recorded, not fatal
            result["row"] = {"size": a.size, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    print(result["row"], flush=True)
    print(f"wrote {write_json(a.out, result)}")


if __name__ == "__main__":
    main()
