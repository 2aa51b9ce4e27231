"""The transformers workload's benchmark loss: per-token loss over fixed non-overlapping windows, in eval mode.

Usage:
    metrics = window_loss(model, ids, context=128, eval_batch=8, device="cpu")   # {"loss": nats/token, "ppl"}

The model computes in its own dtype (float32, or a ledger's ``eval_dtype = "bfloat16"``, or a QLoRA
participant's NF4 base); the logits are upcast to float32 for the loss, and the sum is accumulated in
Python floats in a fixed order, so the number is deterministic on a device for a given model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from woolf.errors import UsageError


@torch.no_grad()
def window_loss(model, ids: torch.Tensor, context: int, eval_batch: int, device: str) -> dict[str, float]:
    n = (len(ids) - 1) // context
    if n == 0:
        raise UsageError(f"the benchmark has {len(ids)} tokens, less than one window of {context + 1}")
    x = ids[: n * context].view(n, context)
    y = ids[1 : n * context + 1].view(n, context)
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, n, eval_batch):
        logits = model(input_ids=x[i : i + eval_batch].to(device)).logits.float()
        yb = y[i : i + eval_batch].to(device)
        total += F.cross_entropy(logits.view(-1, logits.shape[-1]), yb.reshape(-1), reduction="sum").item()
        count += yb.numel()
        del logits
    model.train(was)
    loss = total / count
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
