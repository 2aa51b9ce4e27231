"""A PR that cannot be audited is said to be so (woolf/participant/verifiable.py): by `train` and `submit`
when the ledger audits, and the validator's result shows in the verdict line and `pr show`. A PR that
`woolf train` made carries its proof (private data and LoRA included): nothing is said of it."""

from __future__ import annotations

import json

import pytest

from woolf.participant.verifiable import retrain_note
from woolf.protocol.config import LedgerConfig


@pytest.mark.unit
def test_the_note_follows_the_validators_own_reason_and_the_ledgers_policy():
    cfg = LedgerConfig(name="x")
    private = {"data": {"kind": "private"}, "proof": {}}  # a recipe declared by hand: no digest of its data
    shard = {"data": {"kind": "shard", "owner": "a", "version": 0}, "proof": {}}
    assert retrain_note(cfg, private, "dense") is None  # the ledger audits nothing: nothing to say
    cfg.validators.retrain_rate = 0.5
    assert retrain_note(cfg, shard, "dense") is None and retrain_note(cfg, shard, "lora") is None
    assert retrain_note(cfg, private, "dense") == (
        "this PR cannot be audited (private data (woolf train --data PATH) that commits to no digest): validators "
        "record it unverifiable (validators.retrain_rate 0.5); under policy.require_retrain it would be refused")
    assert "(no proof of training" in retrain_note(cfg, {"data": shard["data"]}, "dense")
    cfg.policy.require_retrain = True
    cfg.validators.retrain_rate = 0.0
    assert retrain_note(cfg, private, "dense").endswith("policy.require_retrain is on: validators will refuse it")


def test_train_submit_verdict_and_pr_show_say_a_pr_is_unverifiable(make_net, tmp_path, cli):
    net = make_net(**{"validators.retrain_rate": "1", "policy.min_improvement": "-10"})
    alice = net.clone("alice")
    (tmp_path / "mine.txt").write_text("Q: what does Ann like?\nA: figs.\n" * 40)
    r = cli("train", "--steps", "3", "--data", str(tmp_path / "mine.txt"), cwd=alice.root)
    assert r.returncode == 0, r.stderr
    assert "cannot be audited" not in r.stderr, r.stderr  # private data: its samples are served on demand
    weights = json.loads((alice.root / ".woolf" / "work" / "trained.json").read_text())
    assert weights["recipe"]["data"]["kind"] == "private" and weights["recipe"]["proof"]
    why = "no recipe declared"  # weights trained elsewhere: submitted as a file, no recipe, no proof
    r = cli("submit", "--json", "--weights", str(alice.root / ".woolf" / "work" / "trained.safetensors"),
            cwd=alice.root)
    assert r.returncode == 0, r.stderr
    sub = json.loads(r.stdout)
    assert sub["unverifiable"].startswith(f"this PR cannot be audited ({why}")
    r = cli("validate", cwd=net.clone("val").root)
    assert r.returncode == 0, r.stderr
    assert f"[retrain: unverifiable ({why}" in r.stdout, r.stdout
    r = cli("pr", "show", sub["id"], cwd=alice.root)
    assert r.returncode == 0 and f"retrain retrain: unverifiable ({why}" in " ".join(r.stdout.split()), r.stdout
