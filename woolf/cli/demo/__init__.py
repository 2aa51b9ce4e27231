"""`woolf --help`'s "Start here": the whole network on this machine.

Usage:
    from woolf.cli import demo; demo.TITLE, demo.COMMANDS   # read by cli/main.py and cli/help.py

Modules: commands.py (`woolf demo`, and `woolf report`, listed under History and results).
"""

from woolf.cli.demo.commands import demo

TITLE = "Start here"
COMMANDS = [demo]
