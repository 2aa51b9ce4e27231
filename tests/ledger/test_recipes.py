"""A version's recipe helpers (woolf/ledger/recipes.py): the ledger's global step for LR schedules."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import key_for
from woolf.ledger.change import set_signer
from woolf.ledger.recipes import global_step
from woolf.validator import Validator


def test_a_change_version_does_not_advance_the_lr_schedule(network):
    """The schedule's global step counts merges: a signers or config change trains nothing (it advanced the
    schedule by workload.steps, as if a contribution had been merged)."""
    work = network.work
    steps = work.config.workload.steps
    set_signer(work, "newval", Path(f"{key_for('newval')}.pub").read_text(), ["validator"])  # version 1: a change
    work.git.run("push", "-q", "origin", "main")
    assert work.head().version == 1 and global_step(work, work.head()) == 0
    alice = network.clone("alice")
    network.train_submit(alice, "alice", steps=3)
    Validator(network.clone("val"), device="cpu").run()
    alice.pull()
    assert alice.head().version == 2 and global_step(alice, alice.head()) == steps  # one merge
    assert global_step(alice, alice.show(1)) == 0
