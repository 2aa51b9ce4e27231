"""Peak RSS of `woolf train` on a GPT-2 ledger (full-parameter AdamW, float32 masters), per parameter.

Usage:
    python benchmarks/train_memory.py                       # 16 x 768, vocabulary 50257: 152M, context 64
    python benchmarks/train_memory.py --layers 2 --width 64 --vocab 1024 --steps 1   # the smoke size
    python benchmarks/train_memory.py --checkpointing       # with workload.params.checkpointing = true

A random GPT-2 checkpoint (saved in bfloat16, as a published one often is; the ledger keeps
float32 masters), a ledger and a participant's clone of it are built in a temporary directory
(nothing is downloaded); then `python -m woolf train --steps N --device cpu` runs under
`/usr/bin/time -v` in the clone, and its maximum RSS is reported in bytes per parameter
against the target of issue 35 (<= 20 B/param + 1 GiB: one model, its gradients, AdamW's two
moments, activations and the interpreter). Results go to
benchmarks/results/train_memory_<params>.json.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    from woolf.git.repo import clean_env

    return {**clean_env(), "PYTHONPATH": str(ROOT), "WOOLF_DEVICE": "cpu"}


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=_env())


def build(root: Path, layers: int, width: int, vocab: int, context: int, batch: int, checkpointing: bool) -> int:
    from gpu_check import build_model

    from woolf.ledger.ledger import Ledger

    model = build_model(root, layers, width, vocab, context)
    overrides = {"policy.min_improvement": "-1e9", "workload.params.context": str(context),
                 "workload.params.batch_size": str(batch), "workload.params.benchmark_bytes": "2048"}
    if checkpointing:
        overrides["workload.params.checkpointing"] = "true"
    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers", weights=model,
                       overrides=overrides))
    params = sum(v.numel() for v in work.load_weights(work.head()).values())
    _git("clone", "-q", "--bare", str(work.root), str(root / "hub.git"), cwd=root)
    _git("clone", "-q", str(root / "hub.git"), str(root / "alice"), cwd=root)
    _git("config", "user.name", "alice", cwd=root / "alice")
    return params


def measure(root: Path, steps: int) -> tuple[int, float]:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "woolf", "train", "--steps", str(steps),
           "--device", "cpu", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root / "alice", capture_output=True, text=True, env=_env())
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"woolf train failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return kib * 1024, secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="woolf-trainmem-", dir=a.workdir) as tmp:
        root = Path(tmp)
        params = build(root, a.layers, a.width, a.vocab, a.context, a.batch, a.checkpointing)
        rss, secs = measure(root, a.steps)
    target = 20 * params + 2**30
    row = {"params": params, "peak_rss_bytes": rss, "peak_rss_gib": round(rss / 2**30, 3),
           "bytes_per_param": round(rss / params, 2), "target_bytes": target,
           "meets_target": rss <= target, "seconds": round(secs, 1)}
    print(f"{params / 1e6:.1f}M params: peak RSS {rss / 2**30:.2f} GiB = {rss / params:.1f} B/param "
          f"(target <= {target / 2**30:.2f} GiB: {'met' if rss <= target else 'MISSED'}), {secs:.0f} s", flush=True)
    name = a.out or f"train_memory_{round(params / 1e6)}M{'_ckpt' if a.checkpointing else ''}.json"
    print(f"wrote {write_json(name, {'machine': machine(), 'args': {k: str(v) for k, v in vars(a).items()}, **row})}")


if __name__ == "__main__":
    main()
