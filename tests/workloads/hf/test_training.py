"""The transformers workload's training loop (woolf/workloads/hf/training.py): the optimizer warm-up."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
from woolf.workloads.textcommon import TextCorpus  # noqa: E402


@pytest.mark.unit
def test_the_optimizer_ramp_is_capped_by_the_contribution():
    wl = TextCorpus()
    wl.optimizer_warmup = 60
    assert [wl.opt_factor(s) for s in (0, 29, 59, 60)] == [1 / 60, 0.5, 1.0, 1.0]  # uncapped: as before
    assert [wl.opt_factor(s, cap=10) for s in (0, 4, 9, 10)] == [0.1, 0.5, 1.0, 1.0]
    assert wl.opt_factor(0, cap=1) == 1.0 and wl.opt_factor(5, cap=100) == 6 / 60


def test_a_short_contribution_under_a_long_warm_up_trains_at_the_full_rate(tmp_path):
    """`optimizer_warmup=60` (the README's line for a pretrained checkpoint) with 3-step contributions ran every
    step at 1/60-3/60 of the rate: the ramp is at most a third of a contribution, so these 3 steps train as
    without a warm-up (a one-step ramp), and a longer contribution still ramps."""
    net = hf_network(tmp_path, tiny.make_tiny_model(tmp_path / "m"))
    wl = net.work.workload()
    base = net.work.load_weights(net.work.show(0))
    data = wl.default_data("alice", 0)

    def delta(warmup: int, steps: int) -> torch.Tensor:
        wl.optimizer_warmup = warmup
        torch.manual_seed(3)  # dropout draws from the global generator, as `woolf train` seeds it
        trained, _ = wl.train({k: v.clone() for k, v in base.items()}, data, steps, seed=3)
        return torch.cat([(trained[k] - base[k]).flatten() for k in sorted(base)])

    assert torch.equal(delta(60, 3), delta(0, 3))
    assert delta(60, 9).norm() < delta(0, 9).norm()  # a ramp over 3 of 9 steps still eases in


def test_a_lora_run_prints_no_library_deprecation_warnings(tmp_path):
    """transformers' `gradient_checkpointing_enable` warned of its removal on every LoRA run (checkpointing is
    LoRA's default); the workload calls the current name."""
    import subprocess
    import sys

    net = hf_network(tmp_path, tiny.make_tiny_model(tmp_path / "m"))
    alice = net.clone("alice")
    r = subprocess.run([sys.executable, "-W", "default", "-m", "woolf", "train", "--offline", "--steps", "1",
                        "--lora", "r=2"], cwd=alice.root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "deprecated" not in r.stderr, r.stderr


def test_audit_reevaluate_reads_a_transformers_ledgers_model_files(tmp_path, cli):
    """`woolf audit --reevaluate` built the transformers workload without its pinned model files and reported
    every merged version as a problem ("the transformers workload has no model files")."""
    from woolf.validator import Validator

    net = hf_network(tmp_path, tiny.make_tiny_model(tmp_path / "m"))
    alice, val = net.clone("alice"), net.clone("val")
    net.train_submit(alice, "alice", steps=2)
    assert [v.state for v in Validator(val, device="cpu").run()] == ["merged"]
    r = cli("audit", "--reevaluate", cwd=net.clone("carol").root)
    assert r.returncode == 0 and "2 versions checked: ok" in r.stdout, r.stdout + r.stderr
