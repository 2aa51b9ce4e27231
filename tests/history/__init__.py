"""Tests of woolf/history/: eval, diff, bisect, revert."""
