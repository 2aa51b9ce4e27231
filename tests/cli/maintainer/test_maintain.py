"""Keys, signers and the hub as a new user meets them (woolf/cli/maintainer/maintain.py)."""

from __future__ import annotations

import getpass
import re
from pathlib import Path

from tests.conftest import SMALL, git, key_for
from woolf.hub.create import init_hub
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger


def _no_identity(tmp_path: Path, monkeypatch) -> dict:
    """An environment where none of --contributor, WOOLF_CONTRIBUTOR, git's user.name is set (the keys
    to set; WOOLF_CONTRIBUTOR is taken out of this test's environment)."""
    monkeypatch.delenv("WOOLF_CONTRIBUTOR", raising=False)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1",
            "COLUMNS": "300"}


def test_key_create_prints_a_signers_add_line_that_works_where_the_maintainer_is_the_os_user(tmp_path, cli,
                                                                                            monkeypatch):
    me = getpass.getuser()  # the maintainer's name is the OS user's, as for `root` in a container
    work = Ledger.init(tmp_path / "work", CreateOptions(storage=str(tmp_path / "storage"), overrides=SMALL,
                       signing_key=key_for("work"), signer=me))
    init_hub(tmp_path / "hub.git", work.root)
    git("remote", "add", "origin", str(tmp_path / "hub.git"), cwd=work.root)
    env = _no_identity(tmp_path, monkeypatch)
    r = cli("key", "create", "--out", str(tmp_path / "keys" / "val-two"), "--role", "validator", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    command = re.search(r"`woolf (signers add [^`]+)`", r.stdout).group(1).split()
    assert command[2] == "val-two", r.stdout  # named after the key file, not the OS user
    assert "already a name in ledger/allowed_signers" in " ".join(r.stderr.split())
    r = cli(*command, cwd=work.root)
    assert r.returncode == 0, r.stderr
    # the clash itself says what to do
    r = cli("signers", "add", me, "--key", str(tmp_path / "keys" / "val-two.pub"), "--role", "validator",
                cwd=work.root)
    assert r.returncode == 2 and "maintainer's name" in r.stderr and "another name" in r.stderr, r.stderr
