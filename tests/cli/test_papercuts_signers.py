"""Issue 38, items 4, 5 and 8: who signs and who contributes, as a new user meets them.

4. `woolf key create` printed `signers add root ...` (the OS user), which fails where `root` is
   already the maintainer's name; 5. `validate` in a clone made before its key was added said
   "ask a maintainer"; 8. the contributor id fell back to the OS user without a word.
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path

from tests.conftest import SMALL, git, key_for, run_cli
from woolf.git.keys import configure
from woolf.git.repo import Git
from woolf.hub.create import init_hub
from woolf.ledger.change import set_signer
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger


def _no_identity(tmp_path: Path) -> dict:
    """An environment where none of --contributor, WOOLF_CONTRIBUTOR, git's user.name is set."""
    env = {k: v for k, v in os.environ.items() if k != "WOOLF_CONTRIBUTOR"}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**env, "HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1",
            "COLUMNS": "300"}


def _run(env: dict, *args, cwd):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "woolf", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_key_create_prints_a_signers_add_line_that_works_where_the_maintainer_is_the_os_user(tmp_path):
    me = getpass.getuser()  # the maintainer's name is the OS user's, as for `root` in a container
    work = Ledger.init(tmp_path / "work", CreateOptions(storage=str(tmp_path / "storage"), overrides=SMALL,
                       signing_key=key_for("work"), signer=me))
    init_hub(tmp_path / "hub.git", work.root)
    git("remote", "add", "origin", str(tmp_path / "hub.git"), cwd=work.root)
    env = _no_identity(tmp_path)
    r = _run(env, "key", "create", "--out", str(tmp_path / "keys" / "val-two"), "--role", "validator", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    command = re.search(r"`woolf (signers add [^`]+)`", r.stdout).group(1).split()
    assert command[2] == "val-two", r.stdout  # named after the key file, not the OS user
    assert "already a name in ledger/allowed_signers" in " ".join(r.stderr.split())
    r = run_cli(*command, cwd=work.root)
    assert r.returncode == 0, r.stderr
    # the clash itself says what to do
    r = run_cli("signers", "add", me, "--key", str(tmp_path / "keys" / "val-two.pub"), "--role", "validator",
                cwd=work.root)
    assert r.returncode == 2 and "maintainer's name" in r.stderr and "another name" in r.stderr, r.stderr


def test_validate_in_a_clone_made_before_its_key_was_added(network):
    late = network.clone("late")  # cloned now; its validator key is added to main afterwards
    configure(Git(late.root), key_for("latecomer"))
    git("config", "user.name", "latecomer", cwd=late.root)
    set_signer(network.work, "latecomer", Path(f"{key_for('latecomer')}.pub").read_text(), ["validator"])
    r = run_cli("validate", "--device", "cpu", cwd=late.root)
    assert r.returncode == 0, r.stderr
    assert "not a validator key" not in r.stderr


def test_validate_without_a_reachable_origin_names_woolf_pull(network, tmp_path):
    late = network.clone("late")
    configure(Git(late.root), key_for("latecomer"))
    git("remote", "set-url", "origin", str(tmp_path / "gone.git"), cwd=late.root)
    r = run_cli("validate", "--device", "cpu", cwd=late.root)
    assert r.returncode == 2 and "not a validator key" in r.stderr and "woolf pull" in r.stderr, r.stderr


def test_the_os_user_fallback_is_said_once_with_how_to_set_an_id(network, tmp_path):
    dest = tmp_path / "anon"
    git("clone", "-q", str(network.hub), str(dest), cwd=tmp_path)  # no user.name in this clone
    env = _no_identity(tmp_path)
    r = _run(env, "train", "--offline", "--steps", "2", "--device", "cpu", cwd=dest)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stderr.split())
    assert "your OS user name" in text and "git config user.name" in text, r.stderr
    r = _run(env, "train", "--offline", "--steps", "2", "--device", "cpu", cwd=dest)
    assert r.returncode == 0 and "OS user" not in r.stderr, r.stderr  # once
    r = _run({**env, "WOOLF_CONTRIBUTOR": "dora"}, "train", "--offline", "--steps", "2", "--device", "cpu",
             cwd=tmp_path / "anon")
    assert "OS user" not in r.stderr
