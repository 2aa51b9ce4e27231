"""Layer 7, a role: the participant trains on its own data and submits the delta as a PR.

Modules: contribute.py (train, submit), state.py (the clone's private work and state areas,
measured speed), residual.py (compression error feedback), feedback.py (what the last verdict
means for local state), follow.py (following main while training), tasks.py (reserving a task).
Imports no other role.

Usage:
    from woolf.participant.contribute import train, submit
"""
