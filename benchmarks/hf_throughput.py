"""The transformers workload on CPU: evaluation throughput, and a merge of a ~100M model vs the I/O floor.

Usage:
    python benchmarks/hf_throughput.py                    # tiny and 8M models' evaluation; 124M merge
    python benchmarks/hf_throughput.py --merge-layers 1 --merge-width 64 --merge-vocab 1024   # smoke size

Evaluation: tokens per second of `Transformers.evaluate` (float32, eval mode,
fixed windows: what every validator runs twice per PR) on the workload's
default 32 KiB benchmark, one torch thread. Merge: a ledger whose version 0
is a GPT-2-small-sized random checkpoint (12 layers, width 768, vocabulary
50257: 124M parameters, 498 MB), one PR whose delta is small noise, and one
`woolf validate` pass; the time beyond its two evaluations is set against the
I/O floor measured in the same process (read current and delta, write the
candidate, md5 of the three; as benchmarks/ledger_ops.py). Results go to
benchmarks/results/hf_throughput.json. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, peak_rss_mib, timed, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions

ROOT = Path(__file__).resolve().parents[1]


def _tiny():
    spec = importlib.util.spec_from_file_location("make_tiny_model", ROOT / "examples" / "make_tiny_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _git(*args, cwd):
    from woolf.git.repo import clean_env

    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def _ledger(root: Path, model: Path, overrides: dict):
    from woolf.ledger.ledger import Ledger

    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers", weights=model,
                       overrides={"policy.min_improvement": "-1e9", **overrides}))
    _git("clone", "-q", "--bare", str(work.root), str(root / "hub.git"), cwd=root)
    return work


def eval_throughput(root: Path, name: str, layers: int, width: int, context: int) -> dict:
    model = _tiny().make_tiny_model(root / name, layers=layers, width=width, heads=max(2, width // 64),
                                    context=context)
    work = _ledger(root / f"{name}-ledger", model, {"workload.params.context": str(context)})
    wl, bench = work.workload(), work.benchmark()
    w0 = work.load_weights(work.show(0))
    wl.evaluate(w0, bench)  # warm-up (tokenizes the benchmark once)
    runs = [timed(wl.evaluate, w0, bench)[0] for _ in range(3)]
    ids = wl.tokens([bench])
    tokens = (len(ids) - 1) // wl.context * wl.context
    return {"model": name, "params": sum(v.numel() for v in w0.values()), "context": context,
            "benchmark_bytes": len(bench), "tokens": tokens, "seconds": min(runs),
            "tokens_per_second": tokens / min(runs), "bytes_per_token": len(bench) / len(ids)}


def merge(root: Path, layers: int, width: int, vocab: int) -> dict:
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, GPT2Config

    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit
    from woolf.validator import Validator

    mod = _tiny()
    model = root / "big"
    torch.manual_seed(0)
    tok = mod.make_tokenizer(512)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64), n_positions=1024,
                        vocab_size=vocab, bos_token_id=0, eos_token_id=0)
    AutoModelForCausalLM.from_config(config).save_pretrained(model)
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=mod.SPECIAL).save_pretrained(model)
    t_init, _ = timed(_ledger, root / "m", model, {"workload.params.benchmark_bytes": "4096"})
    hub = root / "m" / "hub.git"
    for who in ("p", "v"):
        _git("clone", "-q", str(hub), str(root / "m" / who), cwd=root)
    p = Ledger.open(root / "m" / "p")
    p.pull()
    base = p.weights_path(p.head())
    g = torch.Generator().manual_seed(1)
    trained = {k: (v + 1e-4 * torch.randn(v.shape, generator=g)).to(v.dtype) for k, v in load_file(base).items()}
    params = sum(v.numel() for v in trained.values())
    tpath = root / "trained.safetensors"
    save_file(trained, tpath)
    del trained
    t_submit, _ = timed(submit, p, weights=tpath, base_version=0, contributor="p")
    v = Validator(Ledger.open(root / "m" / "v"), device="cpu")
    t_validate, verdicts = timed(v.run)
    [verdict] = verdicts
    assert verdict.accepted, verdict.reason
    t = verdict.timings
    led = v.ledger
    cur, new = led.weights_path(led.show(0)), led.weights_path(led.show(1))

    def floor():
        a, b = load_file(cur), load_file(new)  # the delta has the current weights' size
        save_file(a, root / "floor.safetensors")
        del a, b

    def md5(path):
        import hashlib

        h = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as fh:
            while b := fh.read(16 << 20):
                h.update(b)

    wl = led.workload()
    window = wl.context
    eval_tokens = 2 * ((len(wl.tokens([led.benchmark()])) - 1) // window * window)  # before and after
    floor_s = min(timed(floor)[0] for _ in range(2))
    md5_s = 3 * timed(md5, cur)[0]
    beyond = t_validate - t.get("evaluation", 0.0)
    return {"params": params, "bytes": cur.stat().st_size, "init_seconds": t_init, "submit_seconds": t_submit,
            "validate_seconds": t_validate, "evaluation_seconds": t.get("evaluation", 0.0),
            "beyond_eval_seconds": beyond, "eval_tokens": eval_tokens,
            "eval_tokens_per_second": eval_tokens / t.get("evaluation", float("nan")), "breakdown": t, "floor_seconds": floor_s, "md5_seconds": md5_s,
            "ratio_to_floor": beyond / (floor_s + md5_s), "peak_rss_mib": peak_rss_mib()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--merge-layers", type=int, default=12)
    ap.add_argument("--merge-width", type=int, default=768)
    ap.add_argument("--merge-vocab", type=int, default=50257)
    ap.add_argument("--eval-sizes", default="tiny:2:32,small:4:256", help="name:layers:width,...")
    ap.add_argument("--out", default="hf_throughput.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    out: dict = {"machine": machine(), "threads": 1}
    import transformers

    out["machine"]["transformers"] = transformers.__version__
    with tempfile.TemporaryDirectory(prefix="woolf-hf-bench-") as tmp:
        root = Path(tmp)
        out["evaluation"] = []
        for spec in args.eval_sizes.split(","):
            name, layers, width = spec.split(":")
            row = eval_throughput(root, name, int(layers), int(width), 128)
            out["evaluation"].append(row)
            print(f"eval {name:>6}: {row['params'] / 1e6:6.2f}M params  {row['tokens']} tokens in "
                  f"{row['seconds']:.3f}s = {row['tokens_per_second']:,.0f} tokens/s")
        m = merge(root, args.merge_layers, args.merge_width, args.merge_vocab)
        out["merge"] = m
        print(f"merge {m['params'] / 1e6:.1f}M params ({m['bytes'] / 1e6:.0f} MB): validate {m['validate_seconds']:.2f}s, "
              f"of which evaluation {m['evaluation_seconds']:.2f}s ({m['eval_tokens_per_second']:.0f} tokens/s); beyond it {m['beyond_eval_seconds']:.2f}s vs "
              f"floor {m['floor_seconds']:.2f}s + md5 {m['md5_seconds']:.2f}s = x{m['ratio_to_floor']:.2f}")
    out["total_seconds"] = time.perf_counter() - t0
    print(f"wrote {write_json(args.out, out)} in {out['total_seconds']:.0f}s")


if __name__ == "__main__":
    main()
