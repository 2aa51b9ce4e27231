"""The transformers workload's evaluation: each window's loss, in eval mode, batched; the benchmark loss their mean.

Usage (Transformers.window_losses, evaluate and evaluate_model, hf/workload.py):
    cache = TokenCache(); ids = cache.ids(data, lambda: wl.tokens([data]))   # tokenized once per text
    losses = window_losses(model, ids, [3, 0, 7], context=128, batch=8, device="cpu")   # mean nats per token
    metrics = window_loss(model, ids, context=128, eval_batch=8, device="cpu")   # {"loss": nats/token, "ppl"}

A window is ``wl.context`` tokens predicting the next ``context`` (non-overlapping, from the start);
the benchmark loss is the mean over all of them. The validator evaluates the benchmark and each scoring
shard a few windows at a time (validator/paired.py, seqscore.py), so the last few texts' token ids are
kept. The model computes in its own dtype (float32, or a ledger's ``eval_dtype = "bfloat16"``, or a
QLoRA participant's NF4 base); the logits are upcast to float32 for the loss, and the mean is taken
in Python floats in a fixed order, so the number is deterministic on a device for a given model.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F

from woolf.errors import UsageError

KEEP_TEXTS = 8  # the benchmark and the scoring shards of a PR (one assigned, two random) fit


class TokenCache:
    """Token ids of the last KEEP_TEXTS texts, by the text's sha256."""

    def __init__(self):
        self._ids: OrderedDict[str, torch.Tensor] = OrderedDict()

    def ids(self, data: bytes, tokenize) -> torch.Tensor:
        key = hashlib.sha256(data).hexdigest()
        got = self._ids.get(key)
        if got is None:
            got = self._ids[key] = tokenize()
            while len(self._ids) > KEEP_TEXTS:
                self._ids.popitem(last=False)
        self._ids.move_to_end(key)
        return got


@torch.no_grad()
def window_losses(model, ids: torch.Tensor, index, context: int, batch: int, device: str) -> list[float]:
    """The mean loss of each window in ``index`` of the token ids ``ids`` under ``model`` (in eval mode), in
    that order, ``batch`` windows per forward pass."""
    idx = torch.as_tensor(list(index), dtype=torch.long)
    ctx = context
    offsets = torch.arange(ctx)
    out: list[float] = []
    for i in range(0, len(idx), batch):
        at = idx[i : i + batch, None] * ctx + offsets
        logits = model(input_ids=ids[at].to(device)).logits.float()
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), ids[at + 1].to(device).reshape(-1), reduction="none")
        out += loss.view(len(at), ctx).mean(1).tolist()
        del logits
    return out


def window_loss(model, ids: torch.Tensor, context: int, eval_batch: int, device: str) -> dict[str, float]:
    """The benchmark's metrics: the mean of every window's loss (window_losses), in eval mode (restored after)."""
    n = (len(ids) - 1) // context
    if n == 0:
        raise UsageError(f"the benchmark has {len(ids)} tokens, less than one window of {context + 1}")
    was = model.training
    model.eval()
    try:
        loss = math.fsum(window_losses(model, ids, range(n), context, eval_batch, device)) / n
    finally:
        model.train(was)
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
