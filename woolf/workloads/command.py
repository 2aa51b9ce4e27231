"""Training by an external command: any script or container can train.

Usage:
    path, summary = run_training_command(
        "python train.py --base {base} --out {out} --data {data} --steps {steps} --state {state}",
        base_weights, data_path, steps=50, seed=0, workdir=Path(".woolf/work"))

The command is split with shlex and run without a shell; placeholders are
substituted per argument, so paths with spaces or shell syntax stay inert.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from woolf.errors import UsageError
from woolf.storage.weights import save_atomic

PLACEHOLDERS = ("base", "out", "data", "steps", "seed", "state")


def run_training_command(command: str, base: dict[str, torch.Tensor], data: str, steps: int,
                         seed: int, workdir: Path, state: Path | None = None) -> tuple[Path, dict]:
    """Run ``command``; returns the path of the weights it wrote and a summary.

    ``{state}`` is a directory the command may keep anything in between contributions
    (optimizer moments, error-feedback residuals); it stays on this machine.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    state = state or workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="cmd-", dir=workdir))
    base_path, out_path = tmp / "base.safetensors", tmp / "out.safetensors"
    save_atomic(base, base_path)
    values = {"base": str(base_path), "out": str(out_path), "data": data, "steps": str(steps),
              "seed": str(seed), "state": str(state)}
    try:
        argv = [arg.format(**values) for arg in shlex.split(command)]
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(f"workload.command is malformed ({exc}); placeholders: "
                         + ", ".join("{" + p + "}" for p in PLACEHOLDERS)) from None
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        raise UsageError(f"training command not found: {argv[0]}") from None
    if proc.returncode != 0:
        raise UsageError(f"training command exited with {proc.returncode}: {proc.stderr.strip()[-800:]}")
    if not out_path.exists():
        raise UsageError("training command finished but wrote no weights to {out}")
    return out_path, {"steps": steps, "seconds": round(time.perf_counter() - t0, 3),
                      "command": argv[0], "data": data}
