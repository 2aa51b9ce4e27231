"""`woolf prove`: answer the challenges to this clone's open PRs, once or until they are settled."""

from __future__ import annotations

import json

from woolf.validator import Validator


def test_prove_answers_a_challenge_then_has_nothing_left(make_net, cli):
    net = make_net(**{"validators.retrain_rate": "1", "policy.min_improvement": "-10"})
    alice, val = net.clone("alice"), net.clone("val")
    pr = net.train_submit(alice, "alice")
    got = cli("prove", cwd=alice.root)
    assert got.returncode == 0 and "no challenge to answer; 1 open PR(s) keep their states" in got.stdout
    assert Validator(val, device="cpu", name="v1").run() == []  # challenged
    got = cli("prove", "--json", cwd=alice.root)
    assert got.returncode == 0, got.stderr
    [answered] = json.loads(got.stdout)["answered"]
    assert answered["pr"] == pr["id"] and answered["validator"] == "val" and answered["bytes"] > 0
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "merged" and v.retrain["retrain"] == "matched"
    got = cli("prove", "--watch", "--interval", "0.1", cwd=alice.root)  # settled: its states go, nothing to watch
    assert got.returncode == 0 and "no open PR keeps states for an audit" in got.stdout
