"""`woolf --help`'s "Participant" commands: follow main, train, submit, see one's PRs and tasks.

Usage:
    from woolf.cli import participant; participant.TITLE, participant.COMMANDS   # cli/main.py, cli/help.py

Modules: contrib.py (train, submit), prove.py (prove: answer audits), prs.py (pr), sync.py (pull, status),
tasks.py (tasks).
"""

from woolf.cli.participant.contrib import submit, train
from woolf.cli.participant.prove import prove
from woolf.cli.participant.prs import pr
from woolf.cli.participant.sync import pull, status
from woolf.cli.participant.tasks import tasks

TITLE = "Participant"
COMMANDS = [pull, train, submit, prove, pr, tasks, status]  # in the help's order
