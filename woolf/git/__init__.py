"""Layer 1: the git binary, run with a clean environment; commits read as attacker-written bytes.

Modules: repo.py (Git: plumbing, refs, atomic pushes with leases), commits.py (size-first and
size-framed commit readers), keys.py (ssh-keygen keys; which key a clone signs with).
Imports only the standard library and woolf.errors.

Usage:
    from woolf.git.repo import Git
"""
