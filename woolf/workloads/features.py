"""What a workload can do beyond the base protocol, declared in its ``FEATURES``.

Usage:
    class MyWorkload:
        FEATURES = frozenset({STATE_DIR, GLOBAL_STEP})  # train() takes state_dir= and global_step=

    if STATE_DIR in features_of(wl):
        wl.train(..., state_dir=path)

Every workload has the base protocol (woolf/workloads/base.py: genesis, benchmark_bytes,
default_data, data_from_path, train with device/seed/progress, evaluate). A caller passes or
calls anything more only when the workload declares it. A workload written before FEATURES
existed (an installed entry point) declares nothing: its features are read once from what it
has, as callers used to find them, so it keeps working as it did.
"""

from __future__ import annotations

import inspect

STATE_DIR = "state_dir"  # train(..., state_dir=Path): keeps the optimizer state there between calls
GLOBAL_STEP = "global_step"  # train(..., global_step=int): the ledger's progress, for LR schedules
FOLLOW = "follow"  # train(..., follow=callable, follow_every=int): move with main while training
FINGERPRINT = "fingerprint"  # fingerprint() -> str: names the architecture (speed, optimizer state)
BIND = "bind"  # bind(read): takes the model files the ledger keeps in git (transformers)
DATA_PARALLEL = "data_parallel"  # train_data_parallel(weights, datas, steps, device, seed)
IN_PLACE = "in_place"  # train(..., in_place=True): may train in the given tensors' memory (one model, not two)
DISTRIBUTED = "distributed"  # train() runs on every rank of a torchrun process group (workloads/parallel.py)
LORA = "lora"  # train_lora(...) -> (factors, summary), by workloads/lora.py over lora_model/_batches/_loss
# windows(data) -> (count, tokens each), window_losses(weights, data, index, device) -> [mean loss per window],
# metrics_of(loss) -> evaluate()'s dict, LINEAR_METRICS {metric: factor}: evaluate() is metrics_of(the mean
# of every window's loss); the validator's paired, sequential evaluation (validator/paired.py) uses them
WINDOWS = "windows"
PROOF = "proof"  # train(..., proof=hook) (and train_lora): commits to its path, or replays a segment (proof.py)
SAMPLES = "samples"  # sample_windows(data, gen, steps), sample_data(nbytes, samples): a private PR's audited batches

_TRAIN_KEYWORDS = (STATE_DIR, GLOBAL_STEP, FOLLOW, IN_PLACE, PROOF)
_METHODS = {FINGERPRINT: "fingerprint", BIND: "bind", DATA_PARALLEL: "train_data_parallel", LORA: "train_lora",
            WINDOWS: "window_losses", SAMPLES: "sample_data"}


def features_of(wl) -> frozenset[str]:
    """The workload's declared ``FEATURES``; for one that declares none, what it has."""
    declared = getattr(wl, "FEATURES", None)
    if declared is not None:
        return frozenset(declared)
    try:  # the old protocol: train()'s keywords and the optional methods say it
        params = inspect.signature(wl.train).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): the base protocol
        params = {}
    return frozenset([f for f in _TRAIN_KEYWORDS if f in params]
                     + [f for f, method in _METHODS.items() if hasattr(wl, method)])
