"""The console script's entry: defer Ctrl-C before anything heavy is imported.

Usage:
    woolf ...            # [project.scripts] woolf = "woolf.cli.launch:entry"
    python -m woolf ...
"""

from __future__ import annotations


def entry() -> None:
    from woolf import interrupts  # deferred: `woolf.cli.launch` itself imports nothing

    interrupts.defer()  # until the root command knows which command runs (cli.main.cli)
    try:
        from woolf.cli.main import entry as run  # deferred: loads every command, Ctrl-C first
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    run()
