"""Tests of woolf/cli/validator/."""
