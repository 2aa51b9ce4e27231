"""`woolf --help`'s "Maintainer" commands: create the ledger and its hub, keys, signers, config, storage.

Usage:
    from woolf.cli import maintainer; maintainer.TITLE, maintainer.COMMANDS   # cli/main.py, cli/help.py

Modules: init.py (init), maintain.py (key, hub, signers, config), storage.py (storage, gc).
"""

from woolf.cli.maintainer.init import init
from woolf.cli.maintainer.maintain import config, hub, key, signers
from woolf.cli.maintainer.storage import gc, storage

TITLE = "Maintainer"
COMMANDS = [init, hub, key, signers, config, gc, storage]  # in the help's order
