"""Tests of woolf/demo/: the whole network on one machine."""
