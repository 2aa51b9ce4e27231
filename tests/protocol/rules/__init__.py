"""Tests of woolf/protocol/rules/."""
