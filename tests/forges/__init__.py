"""Tests of woolf/forges/: the GitHub adapter against a local OpenAPI-checked server."""
