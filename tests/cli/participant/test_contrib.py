"""`woolf train` and `woolf submit` as commands (woolf/cli/participant/contrib.py, progress.py): progress
lines off a terminal, no empty bar before an early error, `--lora` with `--nproc` refused before torchrun starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git
from woolf.participant import TrainOptions
from woolf.participant.state import work_dir
from woolf.validator import Validator


def test_progress_lines_when_stderr_is_not_a_terminal(network, cli):
    r = cli("train", "--steps", "3", cwd=network.clone("alice").root)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("training step")]
    assert [x.split()[2] for x in lines] == ["1/3", "3/3"] and "loss" in lines[-1], r.stderr


def test_no_empty_progress_bar_before_an_early_error(network, cli):
    r = cli("train", "--take", "no-such-task", cwd=network.clone("alice").root, env={"TTY_COMPATIBLE": "1"})
    assert r.returncode != 0 and "no-such-task" in r.stderr, r.stderr
    assert "training" not in r.stderr and "0/" not in r.stderr, r.stderr  # an error, and no bar above it


def test_lora_with_several_processes_is_refused_before_torchrun_starts(network, cli):
    alice = network.clone("alice")
    for args, env in ((["--lora", "r=2"], {}), ([], {"WOOLF_LORA": "r=4"})):
        r = cli("train", "--nproc", "2", *args, cwd=alice.root, env=env)
        assert r.returncode == 2 and r.stderr.count("error:") == 1, r.stderr
        assert "--lora trains on one process" in r.stderr and "torchrun" not in r.stderr.lower()


def test_train_lora_takes_a_bare_rank_as_demo_lora_does(network, cli):
    net_ledger = network.clone("alice")
    r = cli("train", "--steps", "2", "--lora", "2", cwd=net_ledger.root)
    # this charlm ledger does not accept lora deltas: the refusal shows --lora 2 was read as r=2
    assert r.returncode == 2 and "does not accept lora deltas" in r.stderr, r.stderr
    assert "expected r=R" not in r.stderr


# The contributor id's fallback to the OS user is said once, with how to set an id.
def _no_identity(tmp_path: Path, monkeypatch) -> dict:
    """An environment where none of --contributor, WOOLF_CONTRIBUTOR, git's user.name is set (the keys
    to set; WOOLF_CONTRIBUTOR is taken out of this test's environment)."""
    monkeypatch.delenv("WOOLF_CONTRIBUTOR", raising=False)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1",
            "COLUMNS": "300"}


def test_the_os_user_fallback_is_said_once_with_how_to_set_an_id(network, tmp_path, cli, monkeypatch):
    dest = tmp_path / "anon"
    git("clone", "-q", str(network.hub), str(dest), cwd=tmp_path)  # no user.name in this clone
    env = _no_identity(tmp_path, monkeypatch)
    r = cli("train", "--offline", "--steps", "2", "--device", "cpu", cwd=dest, env=env)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stderr.split())
    assert "your OS user name" in text and "git config user.name" in text, r.stderr
    r = cli("train", "--offline", "--steps", "2", "--device", "cpu", cwd=dest, env=env)
    assert r.returncode == 0 and "OS user" not in r.stderr, r.stderr  # once
    r = cli("train", "--offline", "--steps", "2", "--device", "cpu", cwd=tmp_path / "anon",
            env={**env, "WOOLF_CONTRIBUTOR": "dora"})
    assert "OS user" not in r.stderr


# `woolf train`'s words: the gate prediction is the validator's merge; the speed reads right.
def test_the_gate_warning_predicts_with_the_merge_the_validator_makes(make_net, cli):
    """The whole delta improves the benchmark by far more than 1e-4; alpha_base 1e-6 of it does not.
    Before, `train` judged the whole delta ("passes") while the validator rejected the merge."""
    net = make_net(**{"merge.alpha_base": "0.000001", "policy.min_improvement": "0.0001",
                      "workload.params.lr": "0.01"})
    alice = net.clone("alice")
    r = cli("train", "--offline", "--steps", "5", cwd=alice.root, env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    record = json.loads((work_dir(alice) / "trained.json").read_text())
    m = record["metrics"]
    assert m["before"]["loss"] - m["after"]["loss"] > 0.001  # the whole delta would pass
    assert record["gate"]["passes"] is False and record["gate"]["scale"] == pytest.approx(1e-6)
    text = " ".join(r.stderr.split())
    assert "gate would reject this result as a validator merges it" in text
    assert "alpha_base x f(0) = 1e-06 of the delta" in text, text
    assert "merged as a validator would at staleness 0" in " ".join(r.stdout.split())
    cli("submit", cwd=alice.root).check_returncode()
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
