"""`woolf --help`'s "Participant" commands: follow main, train, submit, see one's PRs and tasks.

Usage:
    from woolf.cli import participant; participant.TITLE, participant.COMMANDS   # cli/main.py, cli/help.py

Modules: contrib.py (train, submit, pr). `pull` and `status` live with the ledger's reading
commands (cli/history/ledger.py), `tasks` with `validators` (cli/validator/quorum.py).
"""

from woolf.cli.history.ledger import pull, status
from woolf.cli.participant.contrib import pr, submit, train
from woolf.cli.validator.quorum import tasks

TITLE = "Participant"
COMMANDS = [pull, train, submit, pr, tasks, status]  # in the help's order
