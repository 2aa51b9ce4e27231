"""Shared CLI plumbing: the application object, JSON/human output, the ledger opener.

Usage:
    @click.command()
    @pass_app
    def log(app): app.emit(data, human=lambda: ...)
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console


@dataclass
class App:
    cwd: Path
    console: Console = field(default_factory=lambda: Console(highlight=False))
    err: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))

    def ledger(self):
        from woolf import layout
        from woolf.ledger import Ledger

        led = Ledger.open(self.cwd)
        local = led.root / layout.CONFIG
        on_main = led.git.show_bytes(f"{layout.MAIN}:{layout.CONFIG}")
        try:
            edited = on_main is not None and local.read_bytes() != on_main
        except OSError:
            edited = False
        if edited:  # woolf reads the config committed on main, never the workspace copy
            self.err.print("[yellow]warning:[/] ledger/woolf.toml has edits that are not on main and are "
                           "ignored: woolf uses the config on main (a maintainer changes it with "
                           "`woolf config set KEY=VALUE`)")
        return led

    def emit_json(self, data) -> None:
        # indented for a terminal; compact (C encoder, ~10x faster at 10k versions) for pipes
        indent = 2 if sys.stdout.isatty() else None
        click.echo(json.dumps(data, indent=indent, sort_keys=True, default=str))


pass_app = click.make_pass_decorator(App)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def device_option(f):
    return click.option(
        "--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
        envvar="WOOLF_DEVICE", help="Where to run the model [env: WOOLF_DEVICE].",
    )(f)


def env_cwd() -> Path:
    return Path(os.environ.get("WOOLF_DIR", "."))


def forge_option(f):
    return click.option(
        "--forge", type=click.Choice(["local", "github"]), envvar="WOOLF_FORGE",
        help="Override forge.kind from ledger/woolf.toml [env: WOOLF_FORGE].",
    )(f)
