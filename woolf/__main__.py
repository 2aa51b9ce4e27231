"""`python -m woolf ...` runs the CLI."""

from woolf.cli.main import entry

entry()
