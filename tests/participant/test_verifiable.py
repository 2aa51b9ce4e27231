"""A PR that cannot be re-trained is said to be so (woolf/participant/verifiable.py): by `train` and `submit`
when the ledger re-trains, and the validator's re-training result shows in the verdict line and `pr show`."""

from __future__ import annotations

import json

import pytest

from woolf.participant.verifiable import retrain_note
from woolf.protocol.config import LedgerConfig


@pytest.mark.unit
def test_the_note_follows_the_validators_own_reason_and_the_ledgers_policy():
    cfg = LedgerConfig(name="x")
    private = {"data": {"kind": "private"}}
    shard = {"data": {"kind": "shard", "owner": "a", "version": 0}}
    assert retrain_note(cfg, private, "dense") is None  # the ledger re-trains nothing: nothing to say
    cfg.validators.retrain_rate = 0.5
    assert retrain_note(cfg, shard, "dense") is None
    assert retrain_note(cfg, private, "dense") == (
        "this PR cannot be re-trained (private data (woolf train --data PATH)): validators record it "
        "unverifiable (validators.retrain_rate 0.5); under policy.require_retrain it would be refused")
    assert "(a lora delta" in retrain_note(cfg, shard, "lora")
    cfg.policy.require_retrain = True
    cfg.validators.retrain_rate = 0.0
    assert retrain_note(cfg, private, "dense").endswith("policy.require_retrain is on: validators will refuse it")


@pytest.mark.parametrize("how", ["data", "lora"])
def test_train_submit_verdict_and_pr_show_say_a_pr_is_unverifiable(make_net, tmp_path, cli, how):
    net = make_net(**{"validators.retrain_rate": "1", "policy.min_improvement": "-10",
                      "delta.accept": '["dense", "lora"]'})
    alice = net.clone("alice")
    (tmp_path / "mine.txt").write_text("Q: what does Ann like?\nA: figs.\n" * 40)
    extra = ["--data", str(tmp_path / "mine.txt")] if how == "data" else ["--lora", "r=2"]
    why = "private data (woolf train --data PATH)" if how == "data" else "a lora delta"
    r = cli("train", "--steps", "3", *extra, cwd=alice.root)
    assert r.returncode == 0, r.stderr
    assert f"note: this PR cannot be re-trained ({why}" in r.stderr and "record it unverifiable" in r.stderr, r.stderr
    r = cli("submit", "--json", cwd=alice.root)
    assert r.returncode == 0, r.stderr
    sub = json.loads(r.stdout)
    assert sub["unverifiable"].startswith(f"this PR cannot be re-trained ({why}")
    r = cli("validate", cwd=net.clone("val").root)
    assert r.returncode == 0, r.stderr
    assert f"[retrain: unverifiable ({why}" in r.stdout, r.stdout
    r = cli("pr", "show", sub["id"], cwd=alice.root)
    assert r.returncode == 0 and f"retrain retrain: unverifiable ({why}" in " ".join(r.stdout.split()), r.stdout
