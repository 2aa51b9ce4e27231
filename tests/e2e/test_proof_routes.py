"""Every kind and route of a contribution is audited bit for bit: LoRA adapters, top-k with its error-feedback
residual (carried from the contributor's previous PR), a run that followed main while training, and a
two-process run of a GPT-2 with dropout replayed on two gloo processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.participant.prove import prove_once
from woolf.validator import Validator

RETRAIN = {"validators.retrain_rate": "1", "policy.min_improvement": "-10", "proof.segments": "126"}


def _audit(val, *participants, name: str = "v1") -> list:
    first = Validator(val, device="cpu", name=name).run()
    for p in participants:
        prove_once(p)
    return first + Validator(val, device="cpu", name=name).run()


def test_a_lora_pr_replays_its_adapters_training(make_net):
    net = make_net(**RETRAIN, **{"delta.accept": '["dense", "topk", "lora"]'})
    alice, val = net.clone("alice"), net.clone("val")
    train(alice, TrainOptions(steps=8, contributor="alice", device="cpu", lora="r=2"))
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert pr["delta_kind"] == "lora"
    [v] = _audit(val, alice)
    assert v.state == "merged" and v.retrain["retrain"] == "matched", v.reason
    assert v.retrain["segments"] == list(range(8))  # every segment (proof.segments covers them all)


def test_topk_prs_replay_their_compression_and_carry_their_residual(make_net):
    net = make_net(**RETRAIN, **{"delta.compress": '"topk:0.05,bits:2"', "scoring.min_assigned": "-10"})
    alice, val = net.clone("alice"), net.clone("val")
    for seed in (0, 1):  # the second carries the residual the first left, and its optimizer state
        train(alice, TrainOptions(steps=8, contributor="alice", seed=seed, device="cpu"))
        pr = submit(alice, SubmitOptions(contributor="alice"))
        assert pr["delta_kind"] == "topk"
        [v] = _audit(val, alice)
        assert v.retrain["retrain"] == "matched", v.reason
    recipe = json.loads(val.git.show_bytes(f"refs/woolf/pr/{pr['id']}/head:submissions/{pr['id']}/submission.json"))
    end = recipe["recipe"]["proof"]["end"]
    assert end["residual_in"] and end["residual_out"] and recipe["recipe"]["proof"]["start"]["carried"]


def test_a_run_that_followed_main_replays_its_follow_points(make_net):
    net = make_net(**RETRAIN, **{"workload.follow_every": "2", "scoring.copy_threshold": "0.9999"})
    alice, bob, val = net.clone("alice"), net.clone("bob"), net.clone("val")
    train(bob, TrainOptions(steps=8, contributor="bob", device="cpu", seed=5))
    submit(bob, SubmitOptions(contributor="bob"))
    merged = []

    def meanwhile(step, total, loss):  # bob's PR lands while alice trains: she follows main
        if step == 3 and not merged:
            with torch.random.fork_rng():  # a validator in this process draws from torch's generator; alice's
                merged.extend(_audit(val, bob))  # dropout state (committed in her chain) must not see it

    train(alice, TrainOptions(steps=8, contributor="alice", device="cpu", progress=meanwhile))
    assert [v.state for v in merged] == ["merged"]
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert pr["base_version"] == 1
    [v] = _audit(val, alice)
    assert v.state == "merged" and v.retrain["retrain"] == "matched", v.reason
    recipe = json.loads(val.git.show_bytes(f"refs/woolf/pr/{pr['id']}/head:submissions/{pr['id']}/submission.json"))
    proof = recipe["recipe"]["proof"]
    assert proof["start"]["version"] == 0 and [v for _, v in proof["follow"]] == [1]


@pytest.fixture(scope="module")
def dropout_model(tmp_path_factory) -> Path:
    """A tiny GPT-2 with its default dropout (0.1): each rank draws its own masks."""
    pytest.importorskip("transformers")
    from tests.workloads.hf.test_workload import tiny

    out = tiny.make_tiny_model(tmp_path_factory.mktemp("models") / "gpt2")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg.get("resid_pdrop", 0.1) > 0 and cfg.get("attn_pdrop", 0.1) > 0
    return out


def test_an_honest_two_process_run_with_dropout_replays_on_two_processes(tmp_path, dropout_model):
    from tests.workloads.hf.test_workload import hf_network

    net = hf_network(tmp_path, dropout_model, **{"validators.retrain_rate": "1", "proof.every": "2"})
    alice, val = net.clone("alice"), net.clone("val")
    env = {"WOOLF_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    trained = run_cli("train", "--steps", "4", "--device", "cpu", "--nproc", "2", cwd=alice.root, env=env,
                      timeout=900)
    assert trained.returncode == 0, trained.stderr[-3000:]
    pr = submit(alice, SubmitOptions(contributor="alice"))
    val.fetch()
    record = json.loads(val.git.show_bytes(f"refs/woolf/pr/{pr['id']}/head:submissions/{pr['id']}/submission.json"))
    assert record["recipe"]["nproc"] == 2 and len(record["recipe"]["proof"]["links"]) == 3
    [v] = _audit(val, alice)
    assert v.state == "merged" and v.retrain["retrain"] == "matched", v.reason
