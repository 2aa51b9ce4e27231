"""Tests of woolf/participant/: train, submit, error feedback, following main."""
