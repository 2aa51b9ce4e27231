"""LoRA contributions measured (issue 33, benchmarks §17): peak RSS of `woolf train --lora` vs full training, bytes per PR.

Usage:
    python benchmarks/lora_memory.py                       # GPT-2 shapes, 16 layers x 768 (~152M), 3 steps, r = 16
    python benchmarks/lora_memory.py --steps 2 --rank 8 --out lora_memory.json
    python benchmarks/lora_memory.py --bytes-only          # the 1B factor file alone (no training)
    python benchmarks/lora_memory.py --dry-run             # a tiny model: proves the script in a minute
    python benchmarks/lora_memory.py --compare-expand --layers 6 --width 512   # validate: expand per use vs once
    python benchmarks/lora_memory.py --only-lora "r=16;r=16,ckpt=1" --out lora_memory_v2.json   # LoRA rows alone

Memory: a ledger of random GPT-2 weights (float32 masters, a 512-token tokenizer trained
locally; nothing downloaded); two clones of its hub train the same steps from version 0,
each a whole `python -m woolf train` process under `/usr/bin/time -v` (maximum RSS): one
full-parameter (AdamW, float32), one `--lora r=R` (peft adapters, frozen float32 base on the
CPU). Both `woolf submit`; the validator merges the LoRA PR (`woolf validate --all`, its RSS
too). Reported: each command's peak RSS, the LoRA/full ratio, the bytes each PR stored.

Bytes: a real lora file for a Llama-shaped 1B model (hidden 2048, 16 layers, MLP 8192,
vocab 32000, untied head; targets q/k/v/o/gate/up/down) with r = 16 random factors, written by
storage/lora.py, against the dense float32 delta of the same model (4 bytes per parameter).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402
from gpu_check import build_model  # noqa: E402

from woolf.ledger.create import CreateOptions

ROOT = Path(__file__).resolve().parents[1]
LLAMA_1B = {"hidden": 2048, "layers": 16, "mlp": 8192, "vocab": 32000, "kv": 2048}


def _env() -> dict:
    from woolf.git.repo import clean_env

    return {**clean_env(), "PYTHONPATH": str(ROOT), "WOOLF_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=_env())


def timed(name: str, args: list[str], cwd: Path, env: dict | None = None) -> dict:
    cmd = ["nice", "-n", "5", "/usr/bin/time", "-v", sys.executable, "-m", "woolf", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**_env(), **(env or {})})
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    out = proc.stdout.strip()
    row = {"command": name, "argv": "woolf " + " ".join(args), "peak_rss_mib": round(rss_kib / 1024, 1),
           "seconds": round(secs, 1), "result": json.loads(out) if out.startswith(("{", "[")) else out[-500:]}
    print(f"{name:>12}: peak RSS {row['peak_rss_mib']:>9.1f} MiB, {secs:.1f} s", flush=True)
    return row


def memory(root: Path, a) -> dict:
    from woolf.ledger.ledger import Ledger

    model = build_model(root, a.layers, a.width, a.vocab, a.context)
    Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers", weights=model,
                overrides={"policy.min_improvement": "-1e9", "scoring.min_effect": "0", "scoring.enabled": "false",
                           "workload.params.context": str(a.context), "workload.params.batch_size": str(a.batch),
                           "workload.params.benchmark_bytes": str(a.benchmark_bytes), "workload.params.lr": "1e-4"}))
    _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
    for who in ("full", "lora", "val"):
        _git("clone", "-q", str(root / "hub.git"), str(root / who), cwd=root)
        _git("config", "user.name", who, cwd=root / who)
    params = sum(v.numel() for v in Ledger.open(root / "val").load_weights(Ledger.open(root / "val").show(0)).values())
    rows = []
    common = ["train", "--steps", str(a.steps), "--device", "cpu", "--json"]
    if a.only_lora:  # LoRA variants alone, each from version 0 in its own clone (full training: an earlier run)
        for i, text in enumerate(a.only_lora.split(";")):
            _git("clone", "-q", str(root / "hub.git"), str(root / f"lora{i}"), cwd=root)
            rows.append(timed(f"train {text}", ["-C", str(root / f"lora{i}"), *common, "--contributor", "lora",
                                                "--lora", text], root))
        return {"params": params, "layers": a.layers, "width": a.width, "vocab": a.vocab, "steps": a.steps,
                "context": a.context, "batch": a.batch, "rows": rows}
    rows.append(timed("train full", ["-C", str(root / "full"), *common, "--contributor", "full"], root))
    rows.append(timed(f"train lora{a.rank}", ["-C", str(root / "lora"), *common, "--contributor", "lora",
                                             "--lora", f"r={a.rank}"], root))
    rows.append(timed("submit full", ["-C", str(root / "full"), "submit", "--contributor", "full", "--json"], root))
    rows.append(timed("submit lora", ["-C", str(root / "lora"), "submit", "--contributor", "lora", "--json"], root))
    if a.compare_expand:  # the same queue judged first with each use expanding the LoRA product again
        subprocess.run(["cp", "-a", str(root / "hub.git"), str(root / "hub_each.git")], check=True)
        _git("clone", "-q", str(root / "hub_each.git"), str(root / "val_each"), cwd=root)
        _git("config", "user.name", "val", cwd=root / "val_each")
        rows.append(timed("validate (expand each use)", ["-C", str(root / "val_each"), "validate", "--all",
                                                         "--device", "cpu", "--json"], root,
                          {"WOOLF_LORA_EXPAND": "each"}))
    rows.append(timed("validate", ["-C", str(root / "val"), "validate", "--all", "--device", "cpu", "--json"], root))
    if a.compare_expand:
        return {"params": params, "layers": a.layers, "width": a.width, "rank": a.rank, "rows": rows}
    full, lora = rows[0]["peak_rss_mib"], rows[1]["peak_rss_mib"]
    dense, small = rows[2]["result"]["delta_size"], rows[3]["result"]["delta_size"]
    return {"params": params, "layers": a.layers, "width": a.width, "vocab": a.vocab, "steps": a.steps,
            "context": a.context, "batch": a.batch, "rank": a.rank, "rows": rows,
            "lora_over_full_rss": round(lora / full, 3), "lora_rss_gib": round(lora / 1024, 3),
            "bytes": {"dense_pr": dense, "lora_pr": small, "ratio": round(small / dense, 5)}}


def llama_1b_spec() -> tuple[dict, list[str]]:
    c = LLAMA_1B
    h, m = c["hidden"], c["mlp"]
    spec = {"model.embed_tokens.weight": ("F32", (c["vocab"], h)), "lm_head.weight": ("F32", (c["vocab"], h)),
            "model.norm.weight": ("F32", (h,))}
    targets = []
    for i in range(c["layers"]):
        p = f"model.layers.{i}"
        shapes = {"self_attn.q_proj": (h, h), "self_attn.k_proj": (c["kv"], h), "self_attn.v_proj": (c["kv"], h),
                  "self_attn.o_proj": (h, h), "mlp.gate_proj": (m, h), "mlp.up_proj": (m, h), "mlp.down_proj": (h, m)}
        for name, shape in shapes.items():
            spec[f"{p}.{name}.weight"] = ("F32", shape)
            targets.append(f"{p}.{name}.weight")
        spec[f"{p}.input_layernorm.weight"] = ("F32", (h,))
        spec[f"{p}.post_attention_layernorm.weight"] = ("F32", (h,))
    return spec, targets


def bytes_1b(root: Path, rank: int) -> dict:
    import math

    import torch

    from woolf.storage.lora import LoraFile, dense_bytes

    spec, targets = llama_1b_spec()
    g = torch.Generator().manual_seed(0)
    factors = {t: (torch.randn(rank, spec[t][1][1], generator=g) * 0.01,
                   torch.randn(spec[t][1][0], rank, generator=g) * 0.01, 2.0) for t in targets}
    path = root / "lora_1b.safetensors"
    LoraFile(factors, spec, 1024).write(path)
    params = sum(math.prod(s) for _, s in spec.values())
    attention = [t for t in targets if ".self_attn." in t]
    LoraFile({t: factors[t] for t in attention}, spec, 1024).write(root / "attn.safetensors")
    return {"attention_only": {"targets": len(attention), "lora_file_bytes": (root / "attn.safetensors").stat().st_size,
                               "ratio": round((root / "attn.safetensors").stat().st_size / dense_bytes(spec), 5)},
            "model": "Llama-shaped 1B " + json.dumps(LLAMA_1B), "params": params, "rank": rank,
            "targets": len(targets), "lora_file_bytes": path.stat().st_size, "dense_f32_bytes": dense_bytes(spec),
            "ratio": round(path.stat().st_size / dense_bytes(spec), 5)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--benchmark-bytes", type=int, default=4000)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--bytes-only", action="store_true", help="only the 1B factor file")
    ap.add_argument("--dry-run", action="store_true", help="a tiny model, 2 steps")
    ap.add_argument("--only-lora", default="", metavar="SPEC;SPEC", help="only `train --lora SPEC` rows")
    ap.add_argument("--compare-expand", action="store_true",
                    help="validate the same queue twice: each use expanding the LoRA product again, then once per PR")
    ap.add_argument("--out", default="lora_memory.json")
    a = ap.parse_args()
    if a.dry_run:
        a.layers, a.width, a.vocab, a.steps, a.context, a.batch, a.benchmark_bytes = 2, 64, 1024, 2, 32, 2, 3000
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = {"machine": machine(), "args": vars(a)}
    with tempfile.TemporaryDirectory(prefix="woolf-lora-") as tmp:
        if not a.compare_expand:
            result["bytes_1b"] = bytes_1b(Path(tmp), 16)
            print("1B bytes:", result["bytes_1b"], flush=True)
            write_json(a.out, result)
        if not a.bytes_only:
            result["memory"] = memory(Path(tmp), a)
    print(f"wrote {write_json(a.out, result)}")


if __name__ == "__main__":
    main()
