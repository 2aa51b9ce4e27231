"""A training workload as an external command: any script or container can train.

Usage (in ledger/woolf.toml):
    [workload]
    name = "charlm"      # model and evaluation, run in-process from main's code
    command = "python examples/train_command.py --base {base} --out {out} --data {data} --steps {steps} --state {state}"

This example reads the base weights, trains the built-in charlm model on the
text files under --data, and writes the result. With --state it keeps its
AdamW moments in that directory between contributions (it stays on the
participant's machine). It touches only the paths it is given; the ledger
computes and submits the delta.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from safetensors.torch import load_file, save_file

from woolf.workloads.charlm import CharLM


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--params", default="", help="k=v,... model parameters matching the ledger's")
    ap.add_argument("--state", help="a directory to keep optimizer state in between contributions")
    args = ap.parse_args()
    params = {k: int(v) for k, v in (kv.split("=") for kv in args.params.split(",") if kv)}
    wl = CharLM(**params)
    state = Path(args.state) / "optimizer" if args.state else None
    trained, summary = wl.train(load_file(args.base), wl.data_from_path(args.data), args.steps,
                                state_dir=state)
    print(f"optimizer: {summary['optimizer']}")
    save_file(trained, args.out)


if __name__ == "__main__":
    main()
