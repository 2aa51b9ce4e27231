"""Tests of woolf/git/: commit readers."""
