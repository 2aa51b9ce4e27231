"""float32 master weights: how much of one small-lr update a bf16 checkpoint's ledger keeps.

Usage:
    python benchmarks/bf16_masters.py                       # GPT-2 4 layers x 128, lr 1e-5 and 1e-4
    python benchmarks/bf16_masters.py --layers 1 --width 32 --lrs 1e-5   # smoke size

Three ledgers start from the same values: a tiny GPT-2 saved in bfloat16, imported (1) as
`woolf init` does now (float32 masters), (2) kept in bfloat16 as before float32 masters
(`--set workload.params.dtype=bfloat16`), and (3) from the same values saved as a float32
checkpoint (the reference). Each gets the same training (alice, same seed and data, few
AdamW steps at a small lr), one PR, one `woolf validate` merge at attenuation 1. Reported:
||v1 - v0|| of each ledger over the reference's, and the fraction of elements that did not
move where the reference's moved. Results go to benchmarks/results/bf16_masters.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, write_json  # noqa: E402
from hf_throughput import _tiny  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions, TrainOptions


def _ledger(root: Path, model: Path, overrides: dict):
    from woolf.git.repo import clean_env
    from woolf.ledger.ledger import Ledger

    work = Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), workload="transformers", weights=model,
                       overrides={"policy.min_improvement": "-1e9", "scoring.min_effect": "0",  # every update merges
                                  "workload.params.context": "32",
                                  "workload.params.batch_size": "4", "workload.params.benchmark_bytes": "3000",
                                  **overrides}))
    hub = root / "hub.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work.root), str(hub)], check=True, env=clean_env())
    subprocess.run(["git", "remote", "add", "origin", str(hub)], cwd=work.root, check=True, env=clean_env())
    return work, hub


def _one_merge(root: Path, model: Path, steps: int, lr: float, extra: dict) -> dict:
    from woolf.git.repo import clean_env
    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit, train
    from woolf.validator import Validator

    work, hub = _ledger(root, model, {"workload.params.lr": repr(lr), **extra})
    clones = {}
    for name in ("alice", "val"):
        subprocess.run(["git", "clone", "-q", str(hub), str(root / name)], check=True, env=clean_env())
        subprocess.run(["git", "config", "user.name", name], cwd=root / name, check=True, env=clean_env())
        clones[name] = Ledger.open(root / name)
    train(clones["alice"], TrainOptions(steps=steps, contributor="alice", device="cpu", seed=0))
    submit(clones["alice"], SubmitOptions(contributor="alice"))
    (verdict,) = Validator(clones["val"], device="cpu").run()
    assert verdict.state == "merged", verdict.reason
    val = clones["val"]
    w0, w1 = val.load_weights(val.show(0)), val.load_weights(val.show(1))
    return {"dtype": val.config.workload.params["dtype"],
            "moved": {k: w1[k].double() - w0[k].double() for k in w0}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lrs", default="1e-5,1e-4")
    ap.add_argument("--out", default="bf16_masters.json")
    a = ap.parse_args()
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        torch.manual_seed(0)  # the same tiny model in every run (and whatever ran before in this process)
        bf16 = _tiny().make_tiny_model(root / "bf16", layers=a.layers, width=a.width, heads=max(2, a.width // 64),
                                       dtype="bfloat16")
        f32 = root / "f32"
        shutil.copytree(bf16, f32)
        w = load_file(bf16 / "model.safetensors")
        save_file({k: v.float() for k, v in w.items()}, f32 / "model.safetensors", metadata={"format": "pt"})
        params = sum(v.numel() for v in w.values())
        for lr in [float(x) for x in a.lrs.split(",")]:
            runs = {name: _one_merge(root / f"{name}-{lr:g}", model, a.steps, lr, extra)
                    for name, model, extra in (("reference_float32", f32, {}), ("bf16_masters", bf16, {}),
                                               ("bf16_kept", bf16, {"workload.params.dtype": "bfloat16"}))}
            ref = runs["reference_float32"]["moved"]
            ref_norm = sum(float(v.norm() ** 2) for v in ref.values()) ** 0.5
            moved_ref = sum(int((v != 0).sum()) for v in ref.values())
            row = {"lr": lr, "steps": a.steps, "params": params, "reference_moved_norm": ref_norm}
            for name in ("bf16_masters", "bf16_kept"):
                got = runs[name]["moved"]
                norm = sum(float(v.norm() ** 2) for v in got.values()) ** 0.5
                # the component of the reference's update that landed
                landed = sum(float((got[k] * ref[k]).sum()) for k in ref) / ref_norm ** 2
                still = sum(int(((got[k] == 0) & (ref[k] != 0)).sum()) for k in ref)
                row[name] = {"stored_dtype": runs[name]["dtype"], "moved_norm_ratio": norm / ref_norm,
                             "update_landed": landed, "elements_not_moved": still / max(1, moved_ref)}
            rows.append(row)
            print(f"lr {lr:g}: float32 masters move {row['bf16_masters']['moved_norm_ratio']:.4f} of the "
                  f"float32 ledger (update landed {row['bf16_masters']['update_landed']:.4f}); kept in bf16: "
                  f"{row['bf16_kept']['update_landed']:.3f} landed, "
                  f"{row['bf16_kept']['elements_not_moved']:.1%} of elements did not move")
    path = write_json(a.out, {"machine": machine(), "layers": a.layers, "width": a.width, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
