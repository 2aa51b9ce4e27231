"""LoRA contributions measured (issue 33, benchmarks §17): peak RSS of `woolf train --lora` vs full training, bytes per PR.

Usage:
    python benchmarks/lora_memory.py                       # GPT-2 shapes, 16 layers x 768 (~152M), 3 steps, r = 16
    python benchmarks/lora_memory.py --steps 2 --rank 8 --out lora_memory.json
    python benchmarks/lora_memory.py --bytes-only          # the 1B factor file alone (no training)
    python benchmarks/lora_memory.py --dry-run             # a tiny model: proves the script in a minute
    python benchmarks/lora_memory.py --compare-expand --layers 6 --width 512   # validate: expand per use vs once
    python benchmarks/lora_memory.py --only-lora "r=16;r=16,ckpt=1" --out lora_memory_v2.json   # LoRA rows alone
    python benchmarks/lora_memory.py --one-b "r=16;r=16,dtype=bf16" --out lora_memory_1b.json  # the 1.2B Llama
    python benchmarks/lora_memory.py --one-b "r=16" --llama 3b --phases --validate   # 3.14B: peak RSS per phase
    python benchmarks/lora_memory.py --one-b "r=16;r=16,base=nf4" --phases --pythonpath OTHER_CHECKOUT  # before
    python benchmarks/lora_memory.py --quality "r=16;r=16,base=nf4" --steps 30 --context 64 --batch 8 \
        --benchmark-bytes 20000    # QLoRA's cost in loss: each merged version's float32 loss (58M Llama)

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
LLAMA_3B = {"hidden": 3072, "layers": 26, "mlp": 8192, "vocab": 32000, "kv": 3072}  # 3.14B parameters
LLAMA_7B = {"hidden": 4096, "layers": 32, "mlp": 11008, "vocab": 32000, "kv": 4096}  # 6.74B: Llama-2-7B's shape
TINY_LLAMA = {"hidden": 256, "layers": 2, "mlp": 512, "vocab": 1024, "kv": 256}  # --one-b --dry-run
LLAMA_SMALL = {"hidden": 512, "layers": 8, "mlp": 1536, "vocab": 32000, "kv": 512}  # 58M: --quality
LLAMAS = {"small": LLAMA_SMALL, "1b": LLAMA_1B, "3b": LLAMA_3B, "7b": LLAMA_7B, "tiny": TINY_LLAMA}


class Phases:
    """Peak RSS per phase of one process: each wrapped function is a phase (nested ones split their caller);
    at every boundary the kernel's high-water mark (VmHWM) is read and reset (/proc/self/clear_refs 5)."""

    def __init__(self):
        self.stack, self.rows = ["(between phases: pull, bookkeeping)"], []

    @staticmethod
    def _status(key: str) -> float:
        with open("/proc/self/status") as fh:
            return int(next(x for x in fh if x.startswith(key)).split()[1]) / 1024

    def boundary(self) -> None:
        self.rows.append({"phase": self.stack[-1], "peak_rss_mib": round(self._status("VmHWM:"), 1),
                          "rss_after_mib": round(self._status("VmRSS:"), 1), "t": round(time.perf_counter(), 2)})
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")

    def wrap(self, owner, attr: str, label: str) -> None:
        fn = getattr(owner, attr, None)
        if fn is None:
            return
        calls = [0]

        def wrapped(*a, **k):
            calls[0] += 1
            self.boundary()
            self.stack.append(label if calls[0] == 1 else f"{label} #{calls[0]}")
            try:
                return fn(*a, **k)
            finally:
                self.boundary()
                self.stack.pop()

        setattr(owner, attr, wrapped)

    def summary(self) -> list[dict]:
        """One row per phase in order of first appearance: its peak over all its segments, seconds."""
        out: dict[str, dict] = {}
        last = self.rows[0]["t"] if self.rows else 0.0
        for r in self.rows:
            row = out.setdefault(r["phase"], {"phase": r["phase"], "peak_rss_mib": 0.0, "seconds": 0.0})
            row["peak_rss_mib"] = max(row["peak_rss_mib"], r["peak_rss_mib"])
            row["rss_after_mib"] = r["rss_after_mib"]
            row["seconds"] = round(row["seconds"] + r["t"] - last, 2)
            last = r["t"]
        return list(out.values())


def phase_child(clone: Path, spec: str, steps: int, out: Path) -> None:
    """``--phase-child``: `woolf train --lora SPEC` then `woolf submit` in this process, each phase's peak RSS.
    The phases are the functions a LoRA contribution runs (whichever of them this checkout has: the
    benchmark measures the code before and after a change alike)."""
    import importlib
    import importlib.util

    import woolf.workloads.hf.workload as hfw
    import woolf.workloads.lora as wlora
    from woolf.ledger.ledger import Ledger
    from woolf.participant import SubmitOptions, TrainOptions, submit
    from woolf.storage.kinds.lora_file import LoraFile

    plora = importlib.import_module("woolf.participant.lora")  # the package exports functions of the same names
    if importlib.util.find_spec("woolf.participant.lora_weights"):
        plora = importlib.import_module("woolf.participant.lora_weights")
    ptrain = importlib.import_module("woolf.participant.train")
    ph = Phases()
    ph.wrap(Ledger, "load_weights", "load (float32 masters)")
    ph.wrap(ptrain, "lora_base", "load (frozen dtype, streamed)")
    ph.wrap(hfw.Transformers, "evaluate", "evaluate")
    ph.wrap(hfw.Transformers, "train_lora", "training (backward, optimizer)")  # what its nested phases leave
    ph.wrap(hfw.Transformers, "lora_model", "model build")
    ph.wrap(wlora, "_adapted", "peft adapters")
    ph.wrap(hfw.Transformers, "lora_loss", "training step (forward)")
    ph.wrap(LoraFile, "write", "factor write")
    ph.wrap(getattr(plora, "Merged", None), "into", "merge targets")
    ph.wrap(getattr(plora, "Merged", None), "save", "trained file write")
    ph.wrap(ptrain, "save_atomic", "trained file write")
    ph.wrap(ptrain, "_predicted_gate", "predicted gate")
    led = Ledger.open(clone)
    t0 = time.perf_counter()
    rec = ptrain.train(led, TrainOptions(steps=steps, contributor="lora", device="cpu", lora=spec))
    ph.boundary()
    ph.stack.append("submit")
    pr = submit(led, SubmitOptions(contributor="lora"))
    ph.boundary()
    out.write_text(json.dumps({"woolf": str(Path(ptrain.__file__).parents[2]), "phases": ph.summary(), "seconds": round(time.perf_counter() - t0, 1),
                               "train": {k: rec.get(k) for k in ("training", "metrics", "gate", "lora")},
                               "pr": {"kind": pr.get("delta_kind"), "bytes": pr.get("delta_size")}}, indent=1))


def _env() -> dict:
    from woolf.git.repo import clean_env

    extra = os.environ.get("PYTHONPATH", "")  # e.g. a bitsandbytes installed with --target (the qlora runs)
    return {**clean_env(), "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), extra) if p), "WOOLF_DEVICE": "cpu",
            "HF_HUB_OFFLINE": "1"}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=_env())


def timed(name: str, args: list[str], cwd: Path, env: dict | None = None, script: list[str] | None = None) -> dict:
    """``woolf ARGS`` (or ``python SCRIPT...``) under /usr/bin/time -v: its peak RSS, seconds and JSON output."""
    cmd = ["nice", "-n", "10", "/usr/bin/time", "-v", sys.executable, *(script or ["-m", "woolf", *args])]
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
    """``--one-b``: `woolf init` of a bf16 Llama checkpoint (``--llama``: 1b, 3b), then each `woolf train --lora
    SPEC` (see the docstring); ``--phases``: train + submit in one process with each phase's peak RSS
    (``Phases``), ``--validate``: then `woolf validate --all` in that clone (every command under time -v)."""
    import gc
    import shutil

    dims = TINY_LLAMA if a.dry_run else LLAMAS[a.llama]
    model = build_llama(root, a.context, dims)
    gc.collect()
    sets = {"policy.min_improvement": "-1e9", "scoring.min_effect": "0", "scoring.enabled": "false",
            "workload.params.context": str(a.context), "workload.params.batch_size": str(a.batch),
            "workload.params.benchmark_bytes": str(a.benchmark_bytes), "workload.params.eval_batch": "4",
            "workload.params.lr": "1e-4", "limits.max_delta_bytes": str(64 * 2**30),  # a multi-GB checkpoint
            **({"workload.params.eval_dtype": a.eval_dtype} if a.eval_dtype else {})}
    rows = [timed("init", ["init", str(root / "work"), "--storage", str(root / "storage"), "--workload",
                           "transformers", "--weights", str(model), "--unsigned", "--json",
                           *[x for k, v in sets.items() for x in ("--set", f"{k}={v}")]], root)]
    shutil.rmtree(model)  # disk: the checkpoint, the init clone's cache (the storage keeps version 0)
    _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
    shutil.rmtree(root / "work")
    for i, text in enumerate(a.one_b.split(";")):
        clone = root / f"lora{i}"
        _git("clone", "-q", str(root / "hub.git"), str(clone), cwd=root)
        _git("config", "user.name", "lora", cwd=clone)
        if a.phases:  # train + submit in one process, its phases' peaks (the whole process under time -v too)
            out = root / f"phases{i}.json"
            rows.append(timed(f"train+submit {text}", [], root, script=[str(Path(__file__).resolve()),
                              "--phase-child", str(clone), "--spec", text, "--steps", str(a.steps),
                              "--out", str(out)], env={"PYTHONPATH": a.pythonpath} if a.pythonpath else None))
            rows[-1]["result"] = json.loads(out.read_text())
            for r in rows[-1]["result"]["phases"]:
                print(f"    {r['phase']:>32}: peak {r['peak_rss_mib']:>9.1f} MiB, {r['seconds']:>7.1f} s", flush=True)
        else:
            rows.append(timed(f"train {text}", ["-C", str(clone), "train", "--steps", str(a.steps), "--device",
                                                "cpu", "--json", "--contributor", "lora", "--lora", text], root))
            rows[-1]["result"] = {k: rows[-1]["result"].get(k) for k in ("training", "metrics", "lora", "gate")} \
                if isinstance(rows[-1]["result"], dict) else rows[-1]["result"]
            if a.validate:
                rows.append(timed("submit", ["-C", str(clone), "submit", "--contributor", "lora", "--json"], root))
        (clone / ".woolf" / "work" / "trained.safetensors").unlink(missing_ok=True)  # disk
        if a.validate:
            rows.append(timed("validate", ["-C", str(clone), "validate", "--all", "--device", "cpu", "--json"],
                              root))
    import math

    spec, _ = llama_1b_spec(dims)
    return {"model": "Llama-shaped " + json.dumps(dims) + ", bf16 checkpoint, float32 masters",
            "params": sum(math.prod(x) for _, x in spec.values()), "steps": a.steps, "context": a.context,
            "batch": a.batch, "eval_dtype": a.eval_dtype or "float32", "rows": rows}


def quality(root: Path, a) -> dict:
    """``--quality SPEC;SPEC``: what each spec's merged version scores. A bf16 Llama (``--llama``, default small)
    imported by `woolf init`; each `woolf train --lora SPEC` from version 0 in its own clone, the same steps,
    data and seed; then the float32 benchmark loss of its trained file, which is the validator's merge of
    the PR at scale 1 bit for bit (tests/e2e/test_hf_lora_eval.py): the loss the ledger records for it."""
    from safetensors.torch import load_file

    from woolf.ledger.ledger import Ledger

    dims = TINY_LLAMA if a.dry_run else LLAMAS[a.llama]
    model = build_llama(root, a.context, dims)
    sets = {"policy.min_improvement": "-1e9", "scoring.min_effect": "0", "scoring.enabled": "false",
            "workload.params.context": str(a.context), "workload.params.batch_size": str(a.batch),
            "workload.params.benchmark_bytes": str(a.benchmark_bytes), "workload.params.lr": str(a.lr)}
    Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers", weights=model,
                overrides=sets))
    _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
    work = Ledger.open(root / "work")
    wl, bench = work.workload(), work.benchmark()
    rows = []
    for i, text in enumerate(a.quality.split(";")):
        clone = root / f"q{i}"
        _git("clone", "-q", str(root / "hub.git"), str(clone), cwd=root)
        _git("config", "user.name", "lora", cwd=clone)
        row = timed(f"train {text}", ["-C", str(clone), "train", "--steps", str(a.steps), "--device", "cpu",
                                      "--json", "--contributor", "lora", "--lora", text], root)
        merged = wl.evaluate(load_file(str(clone / ".woolf" / "work" / "trained.safetensors")), bench, "cpu")
        res = row["result"]
        row["result"] = {"reported": res["metrics"], "evaluation": res["training"]["lora"].get("evaluation"),
                         "train_losses": res["training"].get("losses", [])[-3:],
                         "merged_float32_loss": merged["loss"]}
        print(f"    merged version's float32 loss {merged['loss']:.6f} (reported after "
              f"{res['metrics']['after']['loss']:.6f}, before {res['metrics']['before']['loss']:.6f})", flush=True)
        rows.append(row)
    return {"model": "Llama-shaped " + json.dumps(dims) + ", bf16 checkpoint", "steps": a.steps, "lr": a.lr,
            "context": a.context, "batch": a.batch, "v0_float32_loss": work.show(0).metrics["loss"], "rows": rows}


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
    ap.add_argument("--llama", default="1b", choices=sorted(LLAMAS), help="--one-b's shape (3b: 3.14B parameters)")
    ap.add_argument("--phases", action="store_true", help="--one-b: train + submit in one process, peak RSS per phase")
    ap.add_argument("--validate", action="store_true", help="--one-b: then `woolf validate --all` in that clone")
    ap.add_argument("--eval-dtype", default="", help="--one-b: the ledger's workload.params.eval_dtype")
    ap.add_argument("--pythonpath", default="", help="--phases: run the child with this PYTHONPATH (another checkout)")
    ap.add_argument("--quality", default="", metavar="SPEC;SPEC",
                    help="each spec's merged-version float32 loss after --steps (QLoRA against bf16 LoRA)")
    ap.add_argument("--lr", type=float, default=1e-3, help="--quality: workload.params.lr")
    ap.add_argument("--phase-child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--spec", default="", help=argparse.SUPPRESS)
    ap.add_argument("--compare-expand", action="store_true",
                    help="validate the same queue twice: each use expanding the LoRA product again, then once per PR")
    ap.add_argument("--out", default="lora_memory.json")
    a = ap.parse_args()
    if a.phase_child:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return phase_child(Path(a.phase_child), a.spec, a.steps, Path(a.out))
    if a.quality:
        a.llama = a.llama if a.llama != "1b" else "small"
        if a.dry_run:
            a.steps, a.context, a.batch, a.benchmark_bytes = 2, 32, 2, 1500
        result = {"machine": machine(), "args": vars(a)}
        with tempfile.TemporaryDirectory(prefix="woolf-lora-") as tmp:
            result["quality"] = quality(Path(tmp), a)
        print(f"wrote {write_json(a.out, result)}")
        return
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
