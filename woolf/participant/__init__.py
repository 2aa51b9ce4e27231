"""Layer 7, a role: the participant trains on its own data and submits the delta as a PR.

Modules: train.py (train), submit.py (submit), lora.py (LoRA contributions), state.py (the clone's
private work and state areas, measured speed), residual.py (compression error feedback), feedback.py (what the last
verdict means for local state), follow.py (following main while training), distributed.py
(`woolf train --nproc N` and torchrun: the process group, rank 0's ledger work), recipe.py (the
recipe train declares and submit sends). Reserving a task and
recording its PR are ledger/tasks.py.
Imports no other role.

Usage:
    from woolf.participant import SubmitOptions, TrainOptions, submit, train
    train(ledger, TrainOptions(steps=60)); submit(ledger, SubmitOptions(message="60 steps"))

``woolf.participant.train`` is the function (its module: ``from woolf.participant.train import ...``).
"""

from woolf.participant.submit import SubmitOptions, submit
from woolf.participant.train import TrainOptions, train

__all__ = ["SubmitOptions", "TrainOptions", "submit", "train"]
