"""`woolf --help`'s "History and results" commands: read, compare, evaluate and undo versions; ratings.

Usage:
    from woolf.cli import history; history.TITLE, history.COMMANDS   # cli/main.py, cli/help.py

Modules: ledger.py (log, show, checkout), tools.py
(eval, diff, bisect, revert), export.py (export), score.py (leaderboard, credit). `report` lives
with the demo (cli/demo/commands.py).
"""

from woolf.cli.demo.commands import report
from woolf.cli.history.export import export
from woolf.cli.history.ledger import checkout, log, show
from woolf.cli.history.score import credit, leaderboard
from woolf.cli.history.tools import bisect, diff, eval_cmd, revert

TITLE = "History and results"
COMMANDS = [log, show, checkout, diff, eval_cmd, bisect, revert, export, leaderboard, credit, report]  # help's order
