"""Tests of woolf/cli/demo/."""
