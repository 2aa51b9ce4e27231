"""Small things a new user met: arguments that did nothing said nothing, raw reprs, a key named `root`."""

from __future__ import annotations

from tests.conftest import git
from woolf.cli.main import main


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


def test_top_level_help_groups_commands_by_role_and_cuts_no_description(capsys):
    from woolf.cli.main import cli

    rc, out, _ = _run(capsys, "--help")
    assert rc == 0
    titles = ["Start here:", "Participant:", "Validator:", "Maintainer:", "History and results:"]
    assert [out.index(t) for t in titles] == sorted(out.index(t) for t in titles)
    assert out.index("Participant:") < out.index("  train ") < out.index("Validator:")
    listing = out.split("Start here:")[1].split("Environment:")[0]
    assert not [ln for ln in listing.splitlines() if ln.rstrip().endswith("...")], listing
    for name in cli.commands:  # every command is listed, grouped or under Other
        assert f"\n  {name} " in out, name


def test_config_get_show_and_json_from_config_set(network, capsys):
    import json

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
