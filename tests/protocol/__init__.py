"""Tests of woolf/protocol/: signatures, authority rules, trailers, configs."""
