"""Bad inputs a new user types (woolf/cli/main.py and the commands): wrong paths, a path under a file, a
directory nobody may write, a wrong parameter: one clear line each, never a traceback, nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

READ_ONLY = Path("/sys/woolf-no-such-dir")  # mkdir there is refused even to root (tests run as root here)


def _one_line(r, *needles):
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr and r.stderr.count("error:") == 1, r.stderr
    for needle in needles:
        assert needle in r.stderr, r.stderr


def test_paths_under_a_file_or_in_a_read_only_place(network, tmp_path, cli):
    (tmp_path / "afile").write_text("not a directory")
    under = str(tmp_path / "afile" / "sub")
    _one_line(cli("init", under, "--unsigned", cwd=tmp_path), "a file is in the way")
    _one_line(cli("key", "create", "--out", under, cwd=tmp_path), "--out")
    _one_line(cli("hub", "init", str(tmp_path / "h.git"), "--from", str(tmp_path / "afile"), cwd=tmp_path),
              "is a file, not a ledger")
    clone = network.clone("alice").root
    _one_line(cli("export", "0", under, cwd=clone), "a file is in the way")
    if READ_ONLY.parent.is_dir():
        _one_line(cli("init", str(READ_ONLY / "led"), "--unsigned", cwd=tmp_path), "cannot create it")
        _one_line(cli("export", "0", str(READ_ONLY / "out"), cwd=clone), "cannot create it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "alice", "hub.git", "storage", "work"]


@pytest.mark.parametrize("setting, says", [
    ("workload.params.lr=abc", "--set workload.params.lr = 'abc' is not a number"),
    ("workload.params.batch_size=2.5", "--set workload.params.batch_size = 2.5 is not an integer"),
    ("workload.params.nope=1", "--set workload.params.nope: charlm takes no such parameter"),
])
def test_init_refuses_a_wrong_workload_param_as_the_option_not_the_config_file(tmp_path, cli, setting, says):
    r = cli("init", "led", "--unsigned", "--set", setting, cwd=tmp_path)
    _one_line(r, says)
    assert "ledger/woolf.toml" not in r.stderr and not (tmp_path / "led").exists()


def test_submit_base_without_weights_is_refused_not_ignored(network, cli):
    alice = network.clone("alice")
    assert cli("train", "--steps", "2", cwd=alice.root).returncode == 0
    _one_line(cli("submit", "--base", "99", cwd=alice.root), "--base goes with --weights")


def test_config_set_names_itself_not_the_config_file(network, cli):
    r = cli("config", "set", "workload.params.lr=abc", cwd=network.work.root)
    _one_line(r, "woolf config set: workload.params.lr = 'abc' is not a number")
    assert "ledger/woolf.toml" not in r.stderr
