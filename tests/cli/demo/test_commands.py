"""`woolf demo`'s words (woolf/cli/demo/commands.py): counts, the wall time, a quorum it cannot reach."""

from __future__ import annotations

import pytest


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
