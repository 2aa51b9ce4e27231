"""The `woolf` command as a new user meets it (woolf/cli/main.py and the commands). Bad inputs (wrong paths, a
path under a file, a directory nobody may write, a wrong parameter): one clear line each, never a traceback,
nothing left behind. Arguments that do nothing are refused; the commands' words say what happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git, key_for
from woolf.cli.main import main
from woolf.ledger.change import set_signer

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


# Small things a new user met: arguments that did nothing said nothing, raw reprs, a key named `root`.


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, " ".join(err.split())


def test_arguments_that_do_nothing_are_refused(network, capsys, tmp_path):
    d = str(network.work.root)
    rc, _, err = _run(capsys, "-C", d, "diff", "0", "0")
    assert rc == 2 and "against itself" in err
    rc, _, err = _run(capsys, "-C", d, "credit", "--since", "999")
    assert rc == 2 and "newest version is 0" in err
    rc, _, err = _run(capsys, "-C", d, "checkout", "0", "-o", str(tmp_path / "no" / "dir" / "x.safetensors"))
    assert rc == 2 and "does not exist" in err and not (tmp_path / "no").exists()


def test_show_prints_words_not_reprs(network, capsys):
    rc, out, _ = _run(capsys, "-C", str(network.work.root), "show", "0")
    assert rc == 0
    assert "None" not in out and "{" not in out and "UTC" in out and "loss=" in out


def test_validators_under_quorum_one_says_why_there_is_nothing_to_compare(network, capsys):
    rc, out, _ = _run(capsys, "-C", str(network.work.root), "validators")
    assert rc == 0 and "quorum 1: validators cast no votes" in " ".join(out.split())


def test_key_create_names_the_key_after_the_contributor_and_init_refuses_a_public_key(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WOOLF_CONTRIBUTOR", raising=False)
    git("init", "-q", cwd=tmp_path)
    git("config", "user.name", "alice", cwd=tmp_path)  # the contributor id, as in a clone
    rc, out, _ = _run(capsys, "-C", str(tmp_path), "key", "create", "--out", str(tmp_path / "k"))
    assert rc == 0
    assert (tmp_path / "k.pub").read_text().split()[2] == "alice"
    assert "woolf signers add alice" in " ".join(out.split())
    rc, _, err = _run(capsys, "-C", str(tmp_path), "init", str(tmp_path / "led"), "--key", str(tmp_path / "k.pub"))
    assert rc == 2 and "is a public key" in err and f"--key {tmp_path / 'k'}" in err
    assert "UNPROTECTED" not in err and not (tmp_path / "led").exists()


def test_config_get_show_and_json_from_config_set(network, capsys):

    d = str(network.work.root)
    rc, out, _ = _run(capsys, "-C", d, "config", "get", "policy.min_improvement")
    assert rc == 0 and out.strip() == "-10.0"
    rc, out, _ = _run(capsys, "-C", d, "config", "show")
    assert rc == 0 and "[policy]" in out and "min_improvement" in out
    rc, _, err = _run(capsys, "-C", d, "config", "get", "policy.nope")
    assert rc == 2 and "no config key" in err
    rc, out, err = _run(capsys, "-C", d, "config", "set", "policy.min_improvement=-0.5", "--json")
    assert rc == 0, err
    assert json.loads(out)["version"] == 1
    rc, out, _ = _run(capsys, "-C", d, "config", "get", "policy.min_improvement", "--json")
    assert json.loads(out) == -0.5


def test_piped_output_is_not_wrapped_at_80_columns(capsys, tmp_path):
    from woolf.cli.app import App

    App(tmp_path).console.print("a long sentence " * 12)
    App(tmp_path).err.print("a long warning " * 12)
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and len(err.splitlines()) == 1


# The CLI's words say what happened.


@pytest.mark.unit
def test_a_workload_typo_is_blamed_on_the_option(tmp_path, cli):
    r = cli("init", "led", "--unsigned", "--workload", "charml", cwd=tmp_path)
    assert r.returncode == 2 and "--workload 'charml' is neither built in" in r.stderr, r.stderr
    assert "woolf.toml" not in r.stderr and not (tmp_path / "led").exists()


def test_log_diff_leaderboard_credit_and_config_set_say_what_they_mean(network, tmp_path, cli):
    work = network.work
    set_signer(work, "newval", Path(f"{key_for('newval')}.pub").read_text(), ["validator"])  # version 1
    r = cli("log", cwd=work.root, env={"COLUMNS": "200"})
    assert r.returncode == 0 and "(signers change)" in r.stdout, r.stdout
    r = cli("diff", "0", "1", "--top", "3", cwd=work.root, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    n = len(work.load_weights(work.show(0)))
    assert f"{n} of {n} tensors unchanged" in r.stdout and "tensor " not in r.stdout, r.stdout
    r = cli("config", "set", "policy.min_improvement=abc", cwd=work.root)
    assert r.returncode == 3 and "--set" not in r.stderr and "woolf config set" in r.stderr, r.stderr
    r = cli("leaderboard", cwd=work.root, env={"COLUMNS": "200"})
    assert r.returncode == 0 and "None" not in r.stdout and "rated windows of" in r.stdout, r.stdout
    words = " ".join(r.stdout.split())
    assert "rating and credit measure different things" in words
    network.train_submit(network.clone("alice"), "alice", steps=3)
    from woolf.validator import Validator

    Validator(network.clone("val"), device="cpu").run()
    r = cli("credit", cwd=network.clone("carol").root, env={"COLUMNS": "200"})
    assert r.returncode == 0 and "rating and credit measure different things" in " ".join(r.stdout.split())
