"""Tests of woolf/cli/: the commands, import cost."""
