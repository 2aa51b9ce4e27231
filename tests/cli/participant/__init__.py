"""Tests of woolf/cli/participant/."""
