"""Tests of woolf/core/: merge arithmetic, compression, merge rules."""
