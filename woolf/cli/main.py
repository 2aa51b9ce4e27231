"""Root `woolf` group and the one exit path that maps errors to exit codes.

Usage:
    woolf --help
    python -m woolf log --json
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from woolf import interrupts
from woolf._version import __version__
from woolf.cli.app import App
from woolf.cli.help import PACKAGES, RoleGroup
from woolf.errors import WoolfError

_ENVIRONMENT = """\b
Environment:
  WOOLF_DIR            run as if started in this directory (-C)
  WOOLF_CONTRIBUTOR    your contributor id (default: git user.name)
  WOOLF_DEVICE         auto, cpu or cuda for training and evaluation
  WOOLF_FORGE          local or github, overriding forge.kind
  WOOLF_GITHUB_TOKEN   GitHub token (also GITHUB_TOKEN, GH_TOKEN) for the github forge
  WOOLF_FORK_REMOTE    git remote of your fork, for PRs from a fork
  WOOLF_FORK_OWNER     owner of that fork on GitHub
  WOOLF_SIGNING_KEY    your SSH private key, for woolf init --key
  WOOLF_VALIDATOR      validator name in verdicts (woolf validate --name)
  WOOLF_DELTA_REMOTE   your own DVC remote for deltas (woolf submit)
  WOOLF_DELTA_URL_BASE public https URL of that remote, for fork PRs
  WOOLF_TRUST_COMMAND  1: run an unsigned ledger's workload.command
  WOOLF_SOURCE         pinned GoodWoolf source for ci/install.sh (woolf init --woolf-source)
  WOOLF_CACHE          where `woolf demo` keeps its pretrained genesis (default ~/.cache/goodwoolf)
  WOOLF_LORA           r=R[,alpha=A,...]: `woolf train --lora` (LoRA adapters; 'off' for none)
  WOOLF_LORA_EXPAND    each: the validator expands a LoRA delta per use, not once per PR (benchmarks)
  WOOLF_FSDP           1: `woolf train --nproc N` shards the model with FSDP2 (default: when it does not fit one GPU)
"""


@click.group(cls=RoleGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=_ENVIRONMENT)
@click.option("-C", "--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=".", envvar="WOOLF_DIR", help="Run as if started in DIR [env: WOOLF_DIR].")
@click.version_option(__version__, prog_name="woolf")
@click.pass_context
def cli(ctx: click.Context, directory: Path) -> None:
    """GoodWoolf: train one model together, with git as the ledger."""
    ctx.obj = App(cwd=directory)
    # train keeps Ctrl-C deferred and checks at every step; validate until torch is loaded (a Ctrl-C
    # inside torch's import is swallowed or breaks it)
    if ctx.invoked_subcommand not in ("train", "validate"):
        interrupts.release()


def _register() -> None:
    for package in PACKAGES:  # cli/<role>/: its TITLE, its COMMANDS (cli/help.py)
        for command in package.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="woolf", standalone_mode=False)
    except WoolfError as exc:
        if interrupts.pending():  # Ctrl-C also reached a child (git, dvc) that failed with it
            click.echo("interrupted", err=True)
            return 130
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
    except OSError as exc:
        if exc.filename is None:  # not a path's problem: a bug, with its traceback
            raise
        # a path the user gave (or one under it) that the system refuses: a read-only directory, a path
        # under a file, a full disk. One line, as any bad input gets; the command's own checks name more
        where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")
        click.secho(f"error: {exc.strerror or exc}: {where}", fg="red", err=True)
        click.echo("  hint: check the path: it must be in a directory you can write, not under a file", err=True)
        return 1
    return rv if isinstance(rv, int) else 0  # ctx.exit(N) in a command (an interrupted demo: 130)


def entry() -> None:
    rc = main()
    interrupts.defer()  # a Ctrl-C while the interpreter shuts down (joining threads) prints no traceback
    sys.exit(rc)
