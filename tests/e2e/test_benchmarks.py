"""Each benchmark runs at a tiny size (a smoke test: no timings are asserted).

A script runs in this process, as `python benchmarks/SCRIPT ARGS` would run it (its `__main__`, its
arguments, WOOLF_BENCH_RESULTS pointing at the test's temp dir): what is tested is the script end to
end and what it writes, not the interpreter's start, and a start that imports torch costs 2 s of CPU.
The processes a benchmark starts itself (peak_memory's commands, ledger_ops' children, the demo's
workers) are still processes.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import pytest

from tests.conftest import SMALL

BENCH = Path(__file__).parents[2] / "benchmarks"


def _run(tmp_path, script, *args):
    """Run benchmarks/``script`` with ``args`` as its `__main__`; the environment, argv, sys.path and the
    benchmarks' own modules (common.py reads WOOLF_BENCH_RESULTS when imported) are put back after."""
    env, argv, path = dict(os.environ), sys.argv, list(sys.path)
    os.environ.update({"WOOLF_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"})
    sys.argv = [str(BENCH / script), *args]
    try:
        runpy.run_path(str(BENCH / script), run_name="__main__")
    finally:
        os.environ.clear()
        os.environ.update(env)
        sys.argv, sys.path[:] = argv, path
        for name, module in list(sys.modules.items()):
            if Path(getattr(module, "__file__", None) or "/").parent == BENCH:
                del sys.modules[name]


def _small() -> list[str]:
    """`--set` arguments for the tests' tiny model (a demo-based benchmark; its --steps says the steps)."""
    return [x for k, v in SMALL.items() if k != "workload.steps" for x in ("--set", f"{k}={v}")]


def test_ledger_ops_smoke(tmp_path):
    _run(tmp_path, "ledger_ops.py", "--sizes", "2e5", "--out", "ops.json")
    data = json.loads((tmp_path / "ops.json").read_text())
    ops = {r["op"] for r in data["sizes"]["200000"]["ops"]}
    assert ops == {"submit", "validate", "checkout_cached", "checkout_storage", "pull", "audit", "submit_command"}


def test_scale_smoke(tmp_path):
    _run(tmp_path, "scale.py", "--versions", "50", "--prs", "3", "--out", "scale.json")
    data = json.loads((tmp_path / "scale.json").read_text())
    assert data["history"][0]["versions"] == 50 and data["queue"]["prs"] == 3


def test_convergence_smoke(tmp_path):
    _run(tmp_path, "convergence.py", "--smoke", "--out", "conv.json")
    data = json.loads((tmp_path / "conv.json").read_text())
    assert {r["arm"] for r in data["rows"]} >= {"serial", "alone", "sync-dp", "sync-diloco", "A0", "A7"}
    assert all(r["final_mean"] > 0 for r in data["rows"])


def test_network_run_smoke(tmp_path):
    _run(tmp_path, "network_run.py", "--participants", "2", "--rounds", "1", "--steps", "5",
         "--validators", "1", "--runs", "1", "--regime", "scratch-iid", *_small(), "--out", "net.json")
    data = json.loads((tmp_path / "net.json").read_text())
    [run] = data["runs"]
    assert run["versions_merged"] + run["prs_rejected"] == 2 and (tmp_path / "net.png").exists()
    assert run["alone_loss"] is not None and run["parallel_loss"] is not None


def test_hf_throughput_smoke(tmp_path):
    pytest.importorskip("transformers")
    _run(tmp_path, "hf_throughput.py", "--merge-layers", "1", "--merge-width", "64", "--merge-vocab", "1024",
         "--eval-sizes", "tiny:1:32")
    data = json.loads((tmp_path / "hf_throughput.json").read_text())
    assert data["evaluation"][0]["tokens_per_second"] > 0 and data["merge"]["ratio_to_floor"] > 0


def test_bf16_masters_smoke(tmp_path):
    pytest.importorskip("transformers")
    _run(tmp_path, "bf16_masters.py", "--layers", "1", "--width", "32", "--lrs", "1e-5", "--steps", "1")
    row = json.loads((tmp_path / "bf16_masters.json").read_text())["rows"][0]
    assert row["bf16_masters"]["moved_norm_ratio"] >= 0.99 and row["bf16_masters"]["stored_dtype"] == "float32"


def test_gpu_check_dry_run(tmp_path):
    pytest.importorskip("transformers")
    _run(tmp_path, "gpu_check.py", "--cpu-smoke", "--prs", "1")
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    (train,), (ledger,) = result["train"], result["ledger"]
    assert "error" not in train and "error" not in ledger, (train, ledger)
    assert train["plain_loop"]["tokens_per_second"] > 0 and train["workload"]["tokens_per_second"] > 0
    assert train["workload"]["mfu"] > 0 and ledger["floor"]["seconds"] > 0
    assert [p["state"] for p in ledger["validate"]["per_pr"]] == ["merged"]
    assert ledger["evaluation_precision"]["differences"] == {"float32": 0.0}


@pytest.mark.parametrize("size", ["1.5B", "7b"])  # the GPT-2 stage, and the 7B Llama stage's path (bf16 evaluation)
def test_gpu_lora_dry_run(tmp_path, size):
    pytest.importorskip("peft")
    _run(tmp_path, "gpu_lora.py", "--dry-run", "--size", size, "--out", "gpu_lora.json")
    row = json.loads((tmp_path / "gpu_lora.json").read_text())["row"]
    assert "error" not in row, row
    assert row["pr"]["kind"] == "lora" and row["validate"]["state"] == "merged"
    assert row["size"] == {"1.5B": "tiny", "7b": "tiny-llama"}[size]


def test_lora_memory_smoke(tmp_path):
    pytest.importorskip("peft")
    _run(tmp_path, "lora_memory.py", "--dry-run", "--out", "lora.json")
    data = json.loads((tmp_path / "lora.json").read_text())
    assert data["bytes_1b"]["ratio"] < 0.011 and data["bytes_1b"]["attention_only"]["ratio"] < 0.005
    assert [r["command"] for r in data["memory"]["rows"]] == ["train full", "train lora16", "submit full",
                                                              "submit lora", "validate"]


def test_peak_memory_smoke(tmp_path):
    _run(tmp_path, "peak_memory.py", "--params", "1e6", "--out", "mem.json")
    rows = json.loads((tmp_path / "mem.json").read_text())["rows"]
    assert [r["command"] for r in rows] == ["init", "train", "submit", "validate", "audit", "checkout", "pull"]
    assert all(r["peak_rss_mib"] > 0 for r in rows)


def test_signing_overhead_smoke(tmp_path):
    _run(tmp_path, "signing_overhead.py", "--prs", "1", "--runs", "1", "--small", "--out", "sig.json")
    data = json.loads((tmp_path / "sig.json").read_text())
    assert data["modes"]["signed"]["prs"] == 1 and set(data["components_s"]) == {
        "sign_commit", "verify_head_and_key", "check_submitter"}


def test_history_bisect_smoke(tmp_path):
    _run(tmp_path, "history_bisect.py", "--versions", "12", "--smoke", "--rules", "attenuated",
         "--out", "bisect.json")
    data = json.loads((tmp_path / "bisect.json").read_text())
    row = data["bisect"]
    assert row["found"] == row["poison"] and row["evaluations"] <= row["max_evaluations"] == 5
    assert data["revert"][0]["rule"] == "attenuated" and data["revert"][0]["left_max_abs"] < 1e-6


def test_compression_smoke(tmp_path):
    _run(tmp_path, "compression.py", "--smoke", "--out", "comp.json")
    data = json.loads((tmp_path / "comp.json").read_text())
    dense, topk = data["rows"]
    assert dense["ratio"] == 1 and topk["ratio"] > 20 and topk["final_mean"] > 0


def test_retention_smoke(tmp_path):
    _run(tmp_path, "retention.py", "--params", "2e5", "--versions", "4", "--snapshot-every", "2", "--out", "ret.json")
    data = json.loads((tmp_path / "ret.json").read_text())
    assert data["timings"]["checkout_rebuilt_info"] == {"version": 3, "from": 2, "deltas": 1}
    assert data["storage_final"]["removed"]["count"] == 2 and data["projection_100M_1000"]["fraction"] < 1


def test_quorum_overhead_smoke(tmp_path):
    _run(tmp_path, "quorum_overhead.py", "--prs", "1", "--runs", "1", "--small", "--out", "quorum.json")
    data = json.loads((tmp_path / "quorum.json").read_text())
    assert data["modes"]["quorum"]["prs"] == 1 and data["modes"]["quorum"]["first_voter_median_s"] > 0
    assert data["vote_phase_s"] > 0


def test_adversaries_smoke(tmp_path):
    # the tests' tiny model, and a short pretrained genesis (a clean machine has none cached: the demo's
    # 1,000 steps take half a minute)
    # (the adversarial run only: the clean run is the same function without adversaries, and the demo's
    # clean network is the network-run smoke's)
    _run(tmp_path, "adversaries.py", "--participants", "2", "--rounds", "1", "--steps", "5", "--only-adversarial",
         "--validators", "1", "--runs", "1", "--pretrain-steps", "40", *_small(), "--out", "adv.json")
    [pair] = json.loads((tmp_path / "adv.json").read_text())["runs"]
    dirty = pair["adversarial"]
    assert pair["clean"] is None and pair["honest_merge_ratio"] is None
    assert set(dirty["by_kind"]) == {"free-rider", "copycat", "overfitter", "noise", "flooder"}
    # the hub bounds a flood (issue 25: per push, per contributor): more than one lands, not all of it
    assert dirty["by_kind"]["flooder"]["prs"] >= 2 and dirty["honest_prs"] == 2
    assert dirty["by_kind"]["noise"]["merged"] == 0  # random deltas teach their shard nothing
    # every verdict is recorded with its scores, merged ones too (read from origin's main)
    merged = dirty["honest_merged"] + sum(k["merged"] for k in dirty["by_kind"].values())
    assert sum(v["state"] == "merged" for v in dirty["verdicts"]) == merged


def test_flood_cost_smoke(tmp_path):
    _run(tmp_path, "flood_cost.py", "--n", "2", "--small", "--out", "flood.json")
    [row] = json.loads((tmp_path / "flood.json").read_text())["rows"]
    assert row["n"] == 2 and row["landed"] == 2 and row["validate_s"] > 0
    assert row["rejected"] == 3 and row["signed_pr_position"] == 0  # every PR gets its verdict, the signed one first


def test_score_separation_smoke(tmp_path):
    _run(tmp_path, "score_separation.py", "--pre", "0", "--n", "2", "--steps", "2", "--trials", "3", "--out", "sep.json")
    data = json.loads((tmp_path / "sep.json").read_text())
    [stage] = data["stages"]
    assert set(stage["separation"]) == {"honest", "free-rider", "overfitter", "flooder"} and len(stage["rows"]) == 8
    assert {s["windows"] for s in data["simulations"]} == {5, 10}


def test_score_separation_demo_histories_smoke(tmp_path):
    def v(who, state, d=None, reason=""):
        s = {} if d is None else {"assigned": d + 0.01, "random": 0.01, "randoms": [0.005, 0.015], "difference": d}
        return {"who": who, "state": state, "rated": True, "reason": reason, **s}

    verdicts = [v("noise", "rejected", reason="a copy of PR x"), v("p1", "merged", 0.08), v("free-rider", "merged", 0.0),
                v("p2", "merged", 0.1), v("free-rider", "rejected", -0.01, "random data improved as much")] * 3
    (tmp_path / "adv.json").write_text(json.dumps({"runs": [{"adversarial": {"verdicts": verdicts}}]}))
    _run(tmp_path, "score_separation.py", "--demo", str(tmp_path / "adv.json"), "--trials", "3", "--out", "d.json")
    got = json.loads((tmp_path / "d.json").read_text())["demo"]
    assert got["runs"] == 1 and got["trials"] == 3 and got["measured"] == {"honest": 6, "free-rider": 6}
    assert got["every_honest_above_every_cheat"] == 1.0
