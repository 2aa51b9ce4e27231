"""A demo participant waits for its own PR's verdict before its next round (demo/worker.py)."""

from __future__ import annotations

import pytest

from woolf.demo.worker import _await_verdict
from woolf.forges.local import LocalForge
from woolf.validator import Validator


def test_participant_waits_until_its_pr_is_no_longer_open(network):
    alice = network.clone("alice")
    sub = network.train_submit(alice, "alice", steps=5)
    forge = LocalForge.for_ledger(alice)
    _await_verdict(alice, sub["id"], wait=0.5)  # no verdict yet: gives up after `wait`, the PR still open
    assert forge.get(sub["id"]).state == "open"
    Validator(network.clone("val"), device="cpu").run()
    _await_verdict(alice, sub["id"], wait=600)  # returns as soon as it sees the verdict
    assert forge.get(sub["id"]).state in ("merged", "rejected")


@pytest.mark.unit
def test_the_demo_waits_by_default():
    from woolf.demo.run import DemoOptions

    assert DemoOptions().wait_verdict > 0 and DemoOptions().regime == "continued-domain"
