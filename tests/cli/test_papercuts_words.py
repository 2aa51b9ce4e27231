"""Issue 38, items 7 and 11: a pretrained genesis warms its optimizer up; the CLI's words say what happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SMALL, key_for
from woolf.ledger.change import set_signer
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger


def _sets(overrides: dict) -> list[str]:
    return [x for k, v in overrides.items() for x in ("--set", f"{k}={v}")]


def test_a_pretrained_charlm_genesis_warms_each_optimizer_up_by_default(tmp_path):
    """Item 7: `woolf init --weights CHECKPOINT` (the README's "Start your own" route) regressed on
    its first train without the optimizer warm-up the demo sets."""
    first = Ledger.init(tmp_path / "first", CreateOptions(storage=str(tmp_path / "s1"), overrides=SMALL))
    assert "optimizer_warmup" not in first.config.workload.params  # random genesis: nothing to protect
    checkpoint = first.weights_path(first.show(0))
    second = Ledger.init(tmp_path / "second", CreateOptions(storage=str(tmp_path / "s2"), overrides=SMALL, weights=checkpoint))
    assert second.config.workload.params["optimizer_warmup"] == 60
    third = Ledger.init(tmp_path / "third", CreateOptions(storage=str(tmp_path / "s3"), weights=checkpoint,
                        overrides={**SMALL, "workload.params.optimizer_warmup": "5"}))
    assert third.config.workload.params["optimizer_warmup"] == 5  # --set wins


@pytest.mark.unit
def test_a_workload_typo_is_blamed_on_the_option(tmp_path, cli):
    r = cli("init", "led", "--unsigned", "--workload", "charml", cwd=tmp_path)
    assert r.returncode == 2 and "--workload 'charml' is neither built in" in r.stderr, r.stderr
    assert "woolf.toml" not in r.stderr and not (tmp_path / "led").exists()


def test_log_diff_leaderboard_credit_and_config_set_say_what_they_mean(network, tmp_path, cli):
    work = network.work
    set_signer(work, "newval", Path(f"{key_for('newval')}.pub").read_text(), ["validator"])  # version 1
    r = cli("log", cwd=work.root, env={"COLUMNS": "200"})
    assert r.returncode == 0 and "(signers change)" in r.stdout, r.stdout
    r = cli("diff", "0", "1", "--top", "3", cwd=work.root, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    n = len(work.load_weights(work.show(0)))
    assert f"{n} of {n} tensors unchanged" in r.stdout and "tensor " not in r.stdout, r.stdout
    r = cli("config", "set", "policy.min_improvement=abc", cwd=work.root)
    assert r.returncode == 3 and "--set" not in r.stderr and "woolf config set" in r.stderr, r.stderr
    r = cli("leaderboard", cwd=work.root, env={"COLUMNS": "200"})
    assert r.returncode == 0 and "None" not in r.stdout and "rated windows of" in r.stdout, r.stdout
    words = " ".join(r.stdout.split())
    assert "rating and credit measure different things" in words
    network.train_submit(network.clone("alice"), "alice", steps=3)
    from woolf.validator import Validator

    Validator(network.clone("val"), device="cpu").run()
    r = cli("credit", cwd=network.clone("carol").root, env={"COLUMNS": "200"})
    assert r.returncode == 0 and "rating and credit measure different things" in " ".join(r.stdout.split())


def test_bisect_that_finds_nothing_bad_exits_0_and_says_so(network, tmp_path, cli):
    alice = network.clone("alice")
    network.train_submit(alice, "alice", steps=3)
    from woolf.validator import Validator

    Validator(network.clone("val"), device="cpu").run()
    mine = network.clone("mine")
    bench = tmp_path / "bench.txt"
    bench.write_text("def f(x):\n    return x + 1\n" * 200)
    r = cli("bisect", "--benchmark", str(bench), "--threshold", "100", cwd=mine.root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing is bad" in r.stdout and "--threshold 100" in r.stdout, r.stdout


@pytest.mark.unit
def test_demo_words_count_right_and_the_wall_time_shows_the_genesis_build():
    from woolf.cli.demo.commands import wall_line
    from woolf.cli.validator.validate import _interrupted
    from woolf.demo.result import DemoResult
    from woolf.demo.run import plural

    assert plural(1, "validator") == "1 validator" and plural(2, "validator") == "2 validators"
    r = DemoResult("x", participants=3, validators=1, rounds=8, steps=30, wall_seconds=100.0, setup_seconds=35.0,
                   genesis_build_seconds=30.0, network_seconds=50.0, reference_seconds=10.0)
    line = wall_line(r)
    assert "set-up 35s, of which building the pretrained genesis 30s" in line
    assert "the network 50s" in line and "the reference runs 10s" in line
    r.genesis_build_seconds = None  # cached: nothing built
    assert "genesis" not in wall_line(r)
    from woolf.cli.demo.commands import outcome_lines

    r.outcomes = {"p1": {"merged": 3, "rejected": 1, "marked": 0, "rating": 4.2, "adversary": False, "credit": 1.0}}
    assert any("rating and credit measure different things" in line for line in outcome_lines(r))
    idle = _interrupted([], watch=True, idle=True)
    assert "PR being validated" not in idle and "no PR in hand" in idle
    assert "PR being validated" in _interrupted([], watch=True, idle=False)


def test_demo_quorum_error_counts_right(tmp_path, cli):
    r = cli("demo", "--quick", "--validators", "1", "--quorum", "2", "--dir", str(tmp_path / "d"), cwd=tmp_path)
    assert r.returncode == 2 and "(1 validator)" in r.stderr and "2 honest validators" in r.stderr, r.stderr


def test_export_prints_every_file_it_wrote(network, tmp_path, cli):
    r = cli("export", "0", str(tmp_path / "o"), cwd=network.work.root)
    assert r.returncode == 0 and "woolf-export.json" in r.stdout, r.stderr
    assert json.loads((tmp_path / "o" / "woolf-export.json").read_text())["version"] == 0
