"""Tests of woolf/cli/history/."""
