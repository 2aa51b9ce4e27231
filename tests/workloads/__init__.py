"""Tests of woolf/workloads/: the transformers workload on tiny local models."""
