"""LoRA contributions measured (issue 33, benchmarks §17): peak RSS of `woolf train --lora` vs full training, bytes per PR.

Usage:
    python benchmarks/lora_memory.py                       # GPT-2 shapes, 16 layers x 768 (~152M), 3 steps, r = 16
    python benchmarks/lora_memory.py --steps 2 --rank 8 --out lora_memory.json
    python benchmarks/lora_memory.py --bytes-only          # the 1B factor file alone (no training)
    python benchmarks/lora_memory.py --dry-run             # a tiny model: proves the script in a minute
    python benchmarks/lora_memory.py --compare-expand --layers 6 --width 512   # validate: expand per use vs once
    python benchmarks/lora_memory.py --only-lora "r=16;r=16,ckpt=1" --out lora_memory_v2.json   # LoRA rows alone
    python benchmarks/lora_memory.py --one-b "r=16;r=16,dtype=bf16" --out lora_memory_1b.json  # the 1.2B Llama

Memory: a ledger of random GPT-2 weights (float32 masters, a 512-token tokenizer trained
locally; nothing downloaded); two clones of its hub train the same steps from version 0,
each a whole `python -m woolf train` process under `/usr/bin/time -v` (maximum RSS): one
full-parameter (AdamW, float32), one `--lora r=R` (peft adapters, frozen float32 base on the
CPU). Both `woolf submit`; the validator merges the LoRA PR (`woolf validate --all`, its RSS
too). Reported: each command's peak RSS, the LoRA/full ratio, the bytes each PR stored.

1B (``--one-b SPEC;SPEC``): a Llama-shaped 1.2B model (the shapes below) with random weights saved
as a bf16 checkpoint, imported by `woolf init` (float32 masters), then each `woolf train --lora
SPEC` from version 0 in its own clone under `/usr/bin/time -v`: 1 step of batch 1 x context 32
(CPU matmuls at 1B are slow; the memory is what is measured). Rows run one after another.

Bytes: a real lora file for a Llama-shaped 1B model (hidden 2048, 16 layers, MLP 8192,
vocab 32000, untied head; targets q/k/v/o/gate/up/down) with r = 16 random factors, written by
storage/kinds/lora_file.py, against the dense float32 delta of the same model (4 bytes per parameter).
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
from gpu_check import _tiny, build_model  # noqa: E402

from woolf.ledger.create import CreateOptions

ROOT = Path(__file__).resolve().parents[1]
LLAMA_1B = {"hidden": 2048, "layers": 16, "mlp": 8192, "vocab": 32000, "kv": 2048}
TINY_LLAMA = {"hidden": 256, "layers": 2, "mlp": 512, "vocab": 1024, "kv": 256}  # --one-b --dry-run


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


def build_llama(root: Path, context: int, dims: dict) -> Path:
    """A Llama-shaped directory (``dims``: LLAMA_1B, 1.2B): random weights saved in bf16, the local tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    c, out, mod = dims, root / "model", _tiny()
    tok = mod.make_tokenizer(512)
    eos = tok.token_to_id(mod.SPECIAL)
    config = LlamaConfig(hidden_size=c["hidden"], num_hidden_layers=c["layers"], intermediate_size=c["mlp"],
                         vocab_size=c["vocab"], num_attention_heads=c["hidden"] // 128, num_key_value_heads=c["hidden"] // 128,
                         max_position_embeddings=max(context, 128), tie_word_embeddings=False,
                         bos_token_id=eos, eos_token_id=eos)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # 2.4 GB, never float32 here
    model.save_pretrained(out)
    del model
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=mod.SPECIAL, bos_token=mod.SPECIAL).save_pretrained(out)
    return out


def one_b(root: Path, a) -> dict:
    """``--one-b``: `woolf init` of the bf16 1.2B checkpoint, then each `woolf train --lora SPEC` (see the docstring)."""
    import gc

    dims = TINY_LLAMA if a.dry_run else LLAMA_1B
    model = build_llama(root, a.context, dims)
    gc.collect()
    sets = {"policy.min_improvement": "-1e9", "scoring.min_effect": "0", "scoring.enabled": "false",
            "workload.params.context": str(a.context), "workload.params.batch_size": str(a.batch),
            "workload.params.benchmark_bytes": str(a.benchmark_bytes), "workload.params.eval_batch": "4",
            "workload.params.lr": "1e-4", "limits.max_delta_bytes": str(16 * 2**30)}  # a 2.4 GB checkpoint
    rows = [timed("init", ["init", str(root / "work"), "--storage", str(root / "storage"), "--workload",
                           "transformers", "--weights", str(model), "--unsigned", "--json",
                           *[x for k, v in sets.items() for x in ("--set", f"{k}={v}")]], root)]
    _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
    for i, text in enumerate(a.one_b.split(";")):
        _git("clone", "-q", str(root / "hub.git"), str(root / f"lora{i}"), cwd=root)
        _git("config", "user.name", "lora", cwd=root / f"lora{i}")
        rows.append(timed(f"train {text}", ["-C", str(root / f"lora{i}"), "train", "--steps", str(a.steps),
                                            "--device", "cpu", "--json", "--contributor", "lora",
                                            "--lora", text], root))
        for r in rows[-1:]:
            r["result"] = {k: r["result"].get(k) for k in ("training", "metrics", "lora", "gate")} \
                if isinstance(r["result"], dict) else r["result"]
    import math

    spec, _ = llama_1b_spec(dims)
    return {"model": "Llama-shaped " + json.dumps(dims) + ", bf16 checkpoint, float32 masters",
            "params": sum(math.prod(x) for _, x in spec.values()), "steps": a.steps, "context": a.context,
            "batch": a.batch, "rows": rows}


def llama_1b_spec(dims: dict | None = None) -> tuple[dict, list[str]]:
    c = dims or LLAMA_1B
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

    from woolf.storage.kinds.lora_file import LoraFile, dense_bytes

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
    ap.add_argument("--one-b", default="", metavar="SPEC;SPEC",
                    help="the Llama-shaped 1.2B bf16 checkpoint: `train --lora SPEC` rows (1 step, batch 1 x 32)")
    ap.add_argument("--compare-expand", action="store_true",
                    help="validate the same queue twice: each use expanding the LoRA product again, then once per PR")
    ap.add_argument("--out", default="lora_memory.json")
    a = ap.parse_args()
    if a.one_b:  # 1 step of 1 x 32 (a dry run: the tiny Llama)
        a.steps, a.context, a.batch, a.benchmark_bytes = 1, 32, 1, 1500
    elif a.dry_run:
        a.layers, a.width, a.vocab, a.steps, a.context, a.batch, a.benchmark_bytes = 2, 64, 1024, 2, 32, 2, 3000
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = {"machine": machine(), "args": vars(a)}
    with tempfile.TemporaryDirectory(prefix="woolf-lora-") as tmp:
        if a.one_b:
            result["one_b"] = one_b(Path(tmp), a)
            print(f"wrote {write_json(a.out, result)}")
            return
        if not a.compare_expand:
            result["bytes_1b"] = bytes_1b(Path(tmp), 16)
            print("1B bytes:", result["bytes_1b"], flush=True)
            write_json(a.out, result)
        if not a.bytes_only:
            result["memory"] = memory(Path(tmp), a)
    print(f"wrote {write_json(a.out, result)}")


if __name__ == "__main__":
    main()
