"""`woolf validate` (woolf/cli/validator/validate.py) where its key or its origin is not what it expects."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git, key_for
from woolf.git.keys import configure
from woolf.git.repo import Git
from woolf.ledger.change import set_signer


def test_validate_in_a_clone_made_before_its_key_was_added(network, cli):
    late = network.clone("late")  # cloned now; its validator key is added to main afterwards
    configure(Git(late.root), key_for("latecomer"))
    git("config", "user.name", "latecomer", cwd=late.root)
    set_signer(network.work, "latecomer", Path(f"{key_for('latecomer')}.pub").read_text(), ["validator"])
    r = cli("validate", "--device", "cpu", cwd=late.root)
    assert r.returncode == 0, r.stderr
    assert "not a validator key" not in r.stderr


def test_validate_without_a_reachable_origin_names_woolf_pull(network, tmp_path, cli):
    late = network.clone("late")
    configure(Git(late.root), key_for("latecomer"))
    git("remote", "set-url", "origin", str(tmp_path / "gone.git"), cwd=late.root)
    r = cli("validate", "--device", "cpu", cwd=late.root)
    assert r.returncode == 2 and "not a validator key" in r.stderr and "woolf pull" in r.stderr, r.stderr
