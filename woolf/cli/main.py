"""Root `woolf` group and the one exit path that maps errors to exit codes.

Usage:
    woolf --help
    python -m woolf log --json
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from woolf import __version__
from woolf.cli.app import App
from woolf.errors import WoolfError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-C", "--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=".", envvar="WOOLF_DIR", help="Run as if started in DIR [env: WOOLF_DIR].")
@click.version_option(__version__, prog_name="woolf")
@click.pass_context
def cli(ctx: click.Context, directory: Path) -> None:
    """GoodWoolf: train one model together, with git as the ledger."""
    ctx.obj = App(cwd=directory)


def _register() -> None:
    from woolf.cli import (
        authority_cmds,
        contrib_cmds,
        ledger_cmds,
        network_cmds,
        score_cmds,
        validate_cmds,
    )

    for module in (ledger_cmds, contrib_cmds, validate_cmds, network_cmds, authority_cmds, score_cmds):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="woolf", standalone_mode=False)
    except WoolfError as exc:
        click.secho(f"error: {exc.message}", fg="red", err=True)
        if exc.hint:
            click.echo(f"  hint: {exc.hint}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0  # ctx.exit(N) in a command (an interrupted demo: 130)


def entry() -> None:
    sys.exit(main())
