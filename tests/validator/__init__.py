"""Tests of woolf/validator/: the queue, checks, scoring, quorum, races, hostile PRs."""
