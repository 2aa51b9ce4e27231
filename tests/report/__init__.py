"""Tests of woolf/report/: ratings, credit, the story."""
