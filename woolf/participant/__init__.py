"""Layer 7, a role: the participant trains on its own data and submits the delta as a PR.

Modules: contribute.py (train, submit), state.py (the clone's private work and state areas,
measured speed), residual.py (compression error feedback), feedback.py (what the last verdict
means for local state), follow.py (following main while training). Reserving a task and
recording its PR are ledger/tasks.py.
Imports no other role.

Usage:
    from woolf.participant.contribute import SubmitOptions, TrainOptions, submit, train
"""
