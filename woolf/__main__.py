"""`python -m woolf ...` runs the CLI."""

from woolf.cli.launch import entry

entry()
