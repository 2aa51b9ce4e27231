"""`woolf demo --lora R` (issue 33): participants contribute LoRA PRs, validators merge their exact product."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from rich.console import Console

from tests.conftest import SMALL, git
from woolf.audit.recompute import audit
from woolf.demo.lora import demo_lora, lora_settings
from woolf.demo.run import DemoOptions, run_demo
from woolf.errors import UsageError
from woolf.ledger.ledger import Ledger


def test_demo_lora_merges_lora_prs_and_the_summary_names_them(tmp_path, monkeypatch):
    from woolf.cli.demo.commands import print_summary

    monkeypatch.setenv("WOOLF_CACHE", str(tmp_path / "cache"))
    r = run_demo(tmp_path / "hub", DemoOptions(participants=2, rounds=1, validators=1, steps=5, quick=True,
                                               settings=dict(SMALL), pretrain_steps=40, lora="4"))
    assert r.lora == "r=4,alpha=8" and not r.interrupted
    assert r.versions_merged >= 1 and r.merged_kinds == {"lora": r.versions_merged}
    assert 0 < r.lora_bytes < 0.5 * r.dense_bytes
    assert set(r.alone_losses) == {"p1", "p2"}  # the alone reference ran (with LoRA: demo/references.py)
    git("clone", "-q", str(tmp_path / "hub" / "hub.git"), str(tmp_path / "mine"), cwd=tmp_path)
    mine = Ledger.open(tmp_path / "mine")
    assert mine.config.workload.params["lora"] == "r=4,alpha=8" and "lora" in mine.config.delta.accept
    v0, v1 = mine.load_weights(mine.show(0)), mine.load_weights(mine.show(1))
    for name, t in v0.items():  # the merged change: rank <= 4 in every target, nothing else moved
        change = v1[name].double() - t.double()  # alpha * B·A, plus float32 rounding of the sum (rtol)
        if name.endswith(("qkv.weight", "proj.weight", "mlp.0.weight", "mlp.2.weight")):
            assert 0 < torch.linalg.matrix_rank(change, rtol=1e-4).item() <= 4, name
        else:
            assert torch.equal(v1[name], t), name
    assert audit(mine).ok  # every LoRA merge recomputed
    console = Console(record=True, width=200)
    print_summary(console, r)
    text = console.export_text()
    assert "contributions: LoRA adapters r=4,alpha=8 on qkv+proj+mlp.0+mlp.2" in text
    assert f"merged by kind: lora {r.versions_merged}" in text and "each participant alone with LoRA" in text
    assert "Each contribution: LoRA adapters r=4,alpha=8" in (tmp_path / "hub" / "report" / "summary.md").read_text()
    assert r.to_json()["lora"] == "r=4,alpha=8"


@pytest.mark.unit
def test_a_bad_lora_value_is_a_one_line_usage_error_before_torch_loads(tmp_path):
    for bad, needle in (("0", "r=0: use a rank in [1, 4096]"), ("r=x", "r='x' is not a number"),
                        ("4,alpha", "expected r=R")):
        probe = ("import runpy, sys\n"
                 f"sys.argv = ['woolf', 'demo', '--quick', '--dir', {str(tmp_path / 'd')!r}, '--lora', {bad!r}]\n"
                 "try:\n    runpy.run_module('woolf', run_name='__main__')\n"
                 "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules)")
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
        first, *rest = proc.stderr.strip().splitlines()
        assert first.startswith(f"error: --lora {bad}: ") and needle in first, proc.stderr
        assert [line.strip().split(":")[0] for line in rest] == ["hint"]
        assert not (tmp_path / "d").exists()


@pytest.mark.unit
def test_demo_lora_values_and_the_ledger_keys_they_set():
    assert demo_lora("4") == "r=4,alpha=8" and demo_lora(" r=16,alpha=16 ") == "r=16,alpha=16"
    assert demo_lora(None) is None and demo_lora("off") is None
    assert lora_settings("r=4,alpha=8", {}) == {"workload.params.lora": '"r=4,alpha=8"',
                                                "delta.accept": '["dense", "topk", "lora"]'}
    assert lora_settings("r=4,alpha=8", {"delta.accept": '["lora"]'}) == {"workload.params.lora": '"r=4,alpha=8"'}
    assert lora_settings(None, {}) == {}
    with pytest.raises(UsageError, match="would refuse every LoRA PR"):
        lora_settings("r=4,alpha=8", {"delta.accept": '["dense"]'})


def test_demo_lora_rank_above_the_ledger_limit_or_a_workload_without_lora_is_refused_before_building(tmp_path,
                                                                                                     monkeypatch):
    with pytest.raises(UsageError, match=r"--lora r=8 is above limits.max_lora_rank 4"):
        run_demo(tmp_path / "a", DemoOptions(quick=True, lora="8", settings={"limits.max_lora_rank": "4"}))
    with pytest.raises(UsageError, match="the synthetic workload does not train LoRA adapters"):
        run_demo(tmp_path / "b", DemoOptions(quick=True, lora="4", regime="scratch-iid",
                                             settings={"workload.name": "synthetic"}))
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else find(name, *a))
    with pytest.raises(UsageError, match="--lora trains adapters with peft, which is not installed"):
        run_demo(tmp_path / "c", DemoOptions(quick=True, lora="4"))
    assert not any((tmp_path / d).exists() for d in "abc")


def test_the_lora_quality_benchmark_runs(tmp_path):
    import json
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WOOLF_BENCH_RESULTS": str(tmp_path), "WOOLF_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "lora_quality.py"), "--smoke"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads((tmp_path / "lora_quality.json").read_text())
    assert {"ledger dense", "ledger lora-2", "alone-lora-2 best", "data parallel (dense)"} <= set(out["summary"])
    assert out["factor_values_per_pr"]["2"] < out["dense_values_per_pr"]


@pytest.mark.unit
def test_the_copycat_copies_a_lora_prs_product():
    from woolf.core.lora import expand
    from woolf.demo.adversaries import dense_of

    A, B = torch.randn(2, 6), torch.randn(5, 2)
    factors = {"w.lora_A": A, "w.lora_B": B, "w.lora_scale": torch.tensor([2.0])}
    assert set(dense_of(factors)) == {"w"} and torch.equal(dense_of(factors)["w"], expand(A, B, 2.0))
    dense = {"w": torch.ones(5, 6)}
    assert dense_of(dense) is dense
