"""`woolf train --nproc 2`, `torchrun -m woolf train` and FSDP2 on two gloo processes (transformers workload).

Two CPU processes share each global batch (each takes half its rows); the result must be where
one process ends (cosine of the deltas >= 0.999, norms within 1%). A rank that dies mid-run
stops the others, is named, and nothing is kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("transformers")

from tests.conftest import run_cli  # noqa: E402
from tests.participant import test_distributed  # noqa: E402
from tests.workloads.hf.test_workload import hf_network  # noqa: E402

CPU, still_model = test_distributed.CPU, test_distributed.still_model  # the module's fixture: a model without dropout


def _delta(clone: Path, base: dict) -> torch.Tensor:
    trained = load_file(clone / ".woolf/work/trained.safetensors")
    return torch.cat([(trained[k] - base[k]).flatten() for k in sorted(base)])


def _close(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    cos = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    return cos, float(b.norm() / a.norm())


def test_two_gloo_processes_end_where_one_does(tmp_path, still_model, cli):
    """--nproc 2 (DDP), torchrun by hand, and FSDP2 (WOOLF_FSDP=1) each end where one process does (that
    one trains in this process: the reference run's process is not what is tested)."""
    net = hf_network(tmp_path, still_model)
    base = net.work.load_weights(net.work.head())
    data = tmp_path / "text.txt"
    data.write_bytes((Path(json.__file__).read_bytes() + Path(torch.__file__).read_bytes()) * 2)
    one, two, by_hand, sharded = net.clone("alice"), net.clone("bob"), net.clone("carol"), net.clone("dave")
    args = ("train", "--steps", "4", "--device", "cpu", "--data", str(data), "--json")
    single = cli(*args, cwd=one.root, env=CPU)
    assert single.returncode == 0, single.stderr[-3000:]
    double = run_cli(*args, "--nproc", "2", cwd=two.root, env=CPU, timeout=900)
    assert double.returncode == 0, double.stderr[-3000:]
    assert json.loads(double.stdout)["training"]["processes"] == 2  # rank 0 alone printed the result
    torchrun = run_cli_torchrun(*args, cwd=by_hand.root)
    assert torchrun.returncode == 0, torchrun.stderr[-3000:]
    fsdp = run_cli(*args, "--nproc", "2", cwd=sharded.root, env={**CPU, "WOOLF_FSDP": "1"}, timeout=900)
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    assert json.loads(fsdp.stdout)["training"]["sharded"] is True  # FSDP2: each rank held half the model
    d1 = _delta(one.root, base)
    for clone in (two, by_hand, sharded):
        cos, ratio = _close(d1, _delta(clone.root, base))
        print(f"{clone.root.name}: cosine {cos:.6f}, norm ratio {ratio:.6f}")
        assert cos >= 0.999 and abs(ratio - 1) <= 0.01, (clone.root.name, cos, ratio)


def run_cli_torchrun(*args: str, cwd: Path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "woolf", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, **CPU}, timeout=900)


def test_a_rank_that_dies_stops_the_others_and_nothing_is_kept(tmp_path, still_model):
    net = hf_network(tmp_path, still_model)
    alice = net.clone("alice")
    proc = run_cli("train", "--steps", "4", "--device", "cpu", "--nproc", "2", cwd=alice.root,
                   env={**CPU, "WOOLF_TEST_RANK_EXIT": "1:2"}, timeout=900)
    assert proc.returncode == 1
    assert "training process rank 1 of 2 exited with status 3" in proc.stderr
    assert "nothing from this run was saved or submitted" in proc.stderr
    assert not (alice.root / ".woolf/work/trained.safetensors").exists()
    assert not (alice.root / ".woolf/work/trained.json").exists()
