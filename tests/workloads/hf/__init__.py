"""Tests of woolf/workloads/hf/."""
