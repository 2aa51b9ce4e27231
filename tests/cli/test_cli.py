"""The CLI is thin: its JSON is the library's data, its errors are exit codes from one place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from woolf.cli.main import main
from woolf.forges.local import LocalForge
from woolf.ledger.ledger import Ledger
from woolf.participant import SubmitOptions, TrainOptions


def _json(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_log_show_pr_json_match_library(network, capsys):
    alice, val = network.clone("alice"), network.clone("val")
    _json(capsys, "-C", str(alice.root), "train", "--steps", "3", "--json", "--contributor", "alice")
    sub = _json(capsys, "-C", str(alice.root), "submit", "--json", "-m", "hello")
    assert {"id", "base_version"} <= set(sub) and sub["base_version"] == 0
    listed = _json(capsys, "-C", str(val.root), "pr", "list", "--json")
    assert [p["id"] for p in listed] == [sub["id"]]
    for key in ("id", "state", "base_version", "contributor", "reason"):
        assert key in listed[0]
    verdicts = _json(capsys, "-C", str(val.root), "validate", "--json", "--device", "cpu")
    assert [v["id"] for v in verdicts] == [sub["id"]]
    for key in ("id", "accepted", "version", "staleness", "attenuation", "metrics", "reason"):
        assert key in verdicts[0]
    val.pull()
    log = _json(capsys, "-C", str(val.root), "log", "--json")
    assert log == [v.to_json() for v in Ledger.open(val.root).log()]
    both = _json(capsys, "-C", str(val.root), "log", "--all", "--json")
    assert both["verdicts"][0]["id"] == sub["id"]
    shown = _json(capsys, "-C", str(val.root), "pr", "show", sub["id"], "--json")
    assert shown["state"] == LocalForge.for_ledger(val).get(sub["id"]).state
    assert shown["submission"]["message"] == "hello"


def test_withdraw_via_cli_and_errors(network, capsys):
    alice = network.clone("alice")
    _json(capsys, "-C", str(alice.root), "train", "--steps", "2", "--json", "--contributor", "alice")
    sub = _json(capsys, "-C", str(alice.root), "submit", "--json")
    assert main(["-C", str(alice.root), "pr", "close", sub["id"]]) == 0
    capsys.readouterr()
    assert main(["-C", str(alice.root), "pr", "close", sub["id"]]) == 2
    assert "already withdrawn" in capsys.readouterr().err
    assert main(["-C", str(alice.root), "pr", "show", "nonsense"]) == 2
    assert "not a submission id" in capsys.readouterr().err
    assert main(["-C", str(alice.root), "validate", sub["id"], "--all"]) == 2


def test_only_its_contributor_withdraws_a_pr(tmp_path, capsys):
    from tests.conftest import make_network

    net = make_network(tmp_path, signed=False)
    alice, bob = net.clone("alice"), net.clone("bob")
    net.train_submit(alice, "alice", steps=2)
    sub = LocalForge.for_ledger(alice).list(state="open")[0]
    assert main(["-C", str(bob.root), "pr", "close", sub.id]) == 2
    err = capsys.readouterr().err
    assert "opened by 'alice'" in err and "--force" in err
    assert LocalForge.for_ledger(bob).get(sub.id).state == "open"  # nothing written
    closed = _json(capsys, "-C", str(bob.root), "pr", "close", sub.id, "--force", "--json")
    assert closed["state"] == "withdrawn" and closed["reason"] == "closed by bob, not its contributor alice"
    net.train_submit(alice, "alice", steps=2, seed=1)
    mine = LocalForge.for_ledger(alice).list(state="open")[0]
    assert main(["-C", str(alice.root), "pr", "close", mine.id]) == 0
    assert "withdrawn by its contributor alice" in capsys.readouterr().out


def test_a_fresh_clone_says_what_it_has_not_fetched(network, capsys):
    from tests.conftest import git

    alice = network.clone("alice")
    network.train_submit(alice, "alice", steps=2)
    LocalForge.for_ledger(alice).withdraw(LocalForge.for_ledger(alice).list()[0].id)
    fresh = network.root / "fresh"
    git("clone", "-q", str(network.hub), str(fresh), cwd=network.root)
    code = main(["-C", str(fresh), "log", "--all", "--json"])  # the README's order: right after git clone
    out = capsys.readouterr()
    assert code == 0 and [v["state"] for v in json.loads(out.out)["verdicts"]] == ["withdrawn"]
    assert "fetching the pull requests from origin first" in out.err
    code = main(["-C", str(fresh), "log"])
    assert code == 0 and "last fetch from origin" in capsys.readouterr().err
    both = _json(capsys, "-C", str(fresh), "log", "--all", "--fetch", "--json")
    assert [v["state"] for v in both["verdicts"]] == ["withdrawn"]
    st = _json(capsys, "-C", str(fresh), "status", "--json")
    assert st["behind_origin"] == 0 and st["fetched_at"] is not None
    out = _json(capsys, "-C", str(fresh), "checkout", "0", "-o", str(network.root / "v0.st"), "--json")
    assert out["version"] == 0 and out["size"] == (network.root / "v0.st").stat().st_size


@pytest.mark.unit
def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert "woolf" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out


def test_first_hour_bad_inputs_are_clear_errors(network, tmp_path):
    """-C to nowhere, init over a file, negative counts, a storage share that vanished: no traceback."""
    import shutil

    from woolf.participant import submit, train

    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [(["-C", str(tmp_path / "nowhere"), "log"], "does not exist"),
             (["init", str(afile), "--unsigned"], "is a file"),
             (["-C", str(network.work.root), "log", "-n", "-3"], "x>=1"),
             (["demo", "--steps", "0", "--dir", str(tmp_path / "d")], "x>=1"),
             (["demo", "--rounds", "-1", "--dir", str(tmp_path / "d")], "x>=1")]
    for args, needle in cases:
        r = run_cli(*args, cwd=tmp_path)
        assert r.returncode != 0 and needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    r = run_cli("log", cwd=tmp_path, env={"WOOLF_DIR": str(tmp_path / "nowhere")})
    assert r.returncode != 0 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    # an unmounted local storage share is never silently recreated by submit
    alice = network.clone("alice")
    train(alice, TrainOptions(steps=3, contributor="alice"))
    storage = network.root / "storage"
    shutil.move(storage, network.root / "unmounted")
    with pytest.raises(Exception, match="does not exist"):
        submit(alice, SubmitOptions(contributor="alice"))
    assert not storage.exists()


def test_uncommitted_config_edits_are_named_not_silently_ignored(network):
    alice = network.clone("alice")
    cfg = alice.root / "ledger" / "woolf.toml"
    cfg.write_text(cfg.read_text() + "\nthis is not toml [\n")
    r = run_cli("log", cwd=alice.root)
    assert r.returncode == 0 and "not on main and are ignored" in r.stderr


@pytest.mark.unit
def test_tables_fit_a_terminal_and_stay_whole_on_a_pipe():
    import io

    from rich.console import Console

    from woolf.cli.app import App

    headers = ["id", "state", "who", "base", "stale", "version", "reason"]
    rows = [["20261130T072011-0000000000-alice", "rejected", "alice", "12", "3", "-",
             "benchmark loss 2.7311 is worse than the current version's 2.6200 by more than the tolerance 0.01"]]
    buf = io.StringIO()
    app = App(cwd=Path("."), console=Console(file=buf, force_terminal=True, width=80, color_system=None))
    app.table(headers, rows, yielding="reason")
    lines = buf.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert sum("alice" in line for line in lines) == 1  # nothing wrapped
    assert "20261130T072011-0000000000-alice" in buf.getvalue() and "benchmark loss 2.7311" in buf.getvalue()
    buf = io.StringIO()
    App(cwd=Path("."), console=Console(file=buf, force_terminal=True, width=160, color_system=None)).table(
        headers, rows, yielding="reason")
    assert len(buf.getvalue().splitlines()) == 2  # wide enough: the reason stays on the row

    buf = io.StringIO()
    App(cwd=Path("."), console=Console(file=buf, force_terminal=False)).table(headers, rows, "reason")
    piped = buf.getvalue().splitlines()
    assert len(piped) == 2 and piped[1].endswith("by more than the tolerance 0.01")
    buf = io.StringIO()  # a reason written by whoever could push a ref: no escape sequence gets through
    App(cwd=Path("."), console=Console(file=buf, force_terminal=True, width=100)).table(
        ["id", "reason"], [["x", "evil \x1b]0;pwned\x07 \x1b[2J"]], "reason")
    assert "\x1b]0" not in buf.getvalue() and "\x1b[2J" not in buf.getvalue() and "\ufffd]0;pwned" in buf.getvalue()


@pytest.mark.unit
def test_every_command_and_option_has_help_and_every_env_var_is_named(capsys):
    import re

    import click

    from woolf.cli.main import cli

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        yield path, cmd

    assert main(["--help"]) == 0
    root_help = capsys.readouterr().out
    named = set(re.findall(r"WOOLF_[A-Z_]+", root_help))
    for path, cmd in walk(cli, ["woolf"]):
        assert (cmd.help or "").strip(), f"{' '.join(path)} has no help"
        for p in cmd.params:
            if isinstance(p, click.Option):
                assert (p.help or "").strip(), f"{' '.join(path)} {p.opts} has no help"
                for var in [p.envvar] if isinstance(p.envvar, str) else (p.envvar or []):
                    assert var in p.help and var in named, f"{var} is not named in help"
    sources = "".join(f.read_text() for f in Path(__file__).parents[2].joinpath("woolf").rglob("*.py"))
    read = set(re.findall(r"environ(?:\.get)?[\[(]\"(WOOLF_[A-Z_]+)", sources)) - {"WOOLF_FAILPOINT"}  # tests only
    assert read <= named, f"environment variables read but not in `woolf --help`: {read - named}"
    assert {"WOOLF_GITHUB_TOKEN", "WOOLF_FORK_REMOTE", "WOOLF_FORK_OWNER"} <= named
