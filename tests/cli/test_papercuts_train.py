"""Issue 38, items 6 and 11 (train's words): the gate prediction is the validator's merge; the speed reads right."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from woolf.participant import TrainOptions
from woolf.participant.state import work_dir
from woolf.validator import Validator


def test_the_gate_warning_predicts_with_the_merge_the_validator_makes(make_net):
    """The whole delta improves the benchmark by far more than 1e-4; alpha_base 1e-6 of it does not.
    Before, `train` judged the whole delta ("passes") while the validator rejected the merge."""
    net = make_net(**{"merge.alpha_base": "0.000001", "policy.min_improvement": "0.0001",
                      "workload.params.lr": "0.01"})
    alice = net.clone("alice")
    r = run_cli("train", "--offline", "--steps", "5", cwd=alice.root, env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    record = json.loads((work_dir(alice) / "trained.json").read_text())
    m = record["metrics"]
    assert m["before"]["loss"] - m["after"]["loss"] > 0.001  # the whole delta would pass
    assert record["gate"]["passes"] is False and record["gate"]["scale"] == pytest.approx(1e-6)
    text = " ".join(r.stderr.split())
    assert "gate would reject this result as a validator merges it" in text
    assert "alpha_base x f(0) = 1e-06 of the delta" in text, text
    assert "merged as a validator would at staleness 0" in " ".join(r.stdout.split())
    run_cli("submit", cwd=alice.root).check_returncode()
    [verdict] = Validator(net.clone("val"), device="cpu").run()
    assert verdict.state == "rejected"  # what train predicted


def test_at_alpha_one_the_prediction_is_the_trained_weights_and_costs_no_evaluation(network):
    from woolf.participant import train

    alice = network.clone("alice")
    record = train(alice, TrainOptions(steps=2, contributor="alice", device="cpu"))
    assert "merged" not in record["metrics"] and record["gate"]["scale"] == 1.0


@pytest.mark.unit
def test_the_progress_bar_shows_seconds_per_step_for_slow_steps():
    from woolf.cli.participant.contrib import step_rate

    assert step_rate(2, 158.0) == "79.0 s/step"  # was "0.0 steps/s"
    assert step_rate(50, 4.0) == "12.5 steps/s"
    assert step_rate(0, 0.0) == ""  # the first step has no interval yet (was 1e9 steps/s)
