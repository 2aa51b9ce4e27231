"""The top-level `woolf --help` (woolf/cli/help.py): commands grouped by role, no description cut."""

from __future__ import annotations

from woolf.cli.main import main


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, " ".join(err.split())


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
