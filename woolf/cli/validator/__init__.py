"""`woolf --help`'s "Validator" commands: validate PRs, audit the ledger, judge the validators.

Usage:
    from woolf.cli import validator; validator.TITLE, validator.COMMANDS   # cli/main.py, cli/help.py

Modules: validate.py (validate, audit), quorum.py (validators).
"""

from woolf.cli.validator.quorum import validators
from woolf.cli.validator.validate import audit, validate

TITLE = "Validator"
COMMANDS = [validate, audit, validators]  # in the help's order
