"""Tests of woolf/cli/maintainer/."""
