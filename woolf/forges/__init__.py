"""Forges: where pull requests live (a git remote, or a hosted forge's API)."""
