"""Tests of woolf/hub/: the hook against hostile refs."""
