"""Tests of woolf/audit/: recomputation and authority checks."""
