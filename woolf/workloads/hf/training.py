"""The transformers workload's training loop: one model in memory, no per-step host syncs, torchrun-aware.

Usage:
    model = uninitialised(config, torch.float32)          # the architecture, its parameters never written
    model = assign(model, weights, device, copy=False)   # the model's parameters ARE the given tensors
    rows = batch_rows(len(ids), context, steps * grad_accum, batch_size, generator)   # all batches, drawn once
    tap = LossTap(steps, device); tap.put(step, loss); tap.latest()   # read without waiting on the device

Memory (issue 35): a model whose parameters are about to be assigned is built uninitialised
(issue 33: transformers' random initialisation would touch a second model's worth of memory);
the weights given are the parameters (no second copy of the model, no
checkpoint kept beside it); gradients are set to None once the last step is taken; the
optimizer state is written to its file tensor by tensor and dropped before the trained
weights are handed back (on the CPU, in float32, they are the parameters themselves).
Activations can be recomputed in the backward pass (``checkpointing``).

Speed: AdamW is fused on CUDA; attention is transformers' SDPA (its default); the batches'
row offsets are drawn once and moved to the device with the tokens, so a step never waits
for the host; the loss is copied to pinned memory without blocking and read when ready
(``LossTap``); ``compile`` wraps the forward pass in ``torch.compile``.
"""

from __future__ import annotations

import torch


def uninitialised(config, dtype) -> torch.nn.Module:
    """``AutoModelForCausalLM.from_config`` without writing its parameters (``no_init_weights``: the pages
    are never touched, so they cost no memory until the weights are assigned). Modules that hold only
    non-persistent buffers (rotary frequencies) are initialised as from_config would: they are
    computed, never assigned; tied parameters are tied."""
    from transformers import AutoModelForCausalLM  # deferred: transformers
    from transformers.initialization import no_init_weights  # deferred: transformers

    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.tie_weights()  # init_weights, skipped, ties them too (lm_head IS the embedding where tied)
    for module in model.modules():
        if module._non_persistent_buffers_set and not any(True for _ in module.parameters(recurse=False)):
            model._init_weights(module)
    return model


def assign(model: torch.nn.Module, weights: dict[str, torch.Tensor], device: str, copy: bool) -> torch.nn.Module:
    """Make ``weights`` (canonical names, tied copies once) the model's parameters and buffers on ``device``.

    Floating tensors become float32 (the model's own dtype); one that already is, on ``device``,
    is used as it is unless ``copy``: training then writes into the caller's tensors. Tied
    parameters (GPT-2's lm_head and wte) get the same Parameter object, so they stay tied.
    """
    owners: dict[int, list[tuple[torch.nn.Module, str, bool]]] = {}
    for mod in model.modules():
        for attr, p in mod._parameters.items():
            if p is not None:
                owners.setdefault(id(p), []).append((mod, attr, True))
        for attr, b in mod._buffers.items():
            if b is not None:
                owners.setdefault(id(b), []).append((mod, attr, False))
    state = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, tensor in weights.items():
            old = state[name]
            dtype = torch.float32 if old.is_floating_point() else old.dtype
            new = tensor.to(device=device, dtype=dtype, copy=copy)
            if isinstance(old, torch.nn.Parameter):
                new = torch.nn.Parameter(new, requires_grad=old.requires_grad)
            for mod, attr, is_param in owners[id(old)]:
                (mod._parameters if is_param else mod._buffers)[attr] = new
    return model.to(device)  # what the weights do not hold (non-persistent buffers) follows


def batch_rows(n_tokens: int, context: int, micro_batches: int, batch_size: int,
               gen: torch.Generator) -> torch.Tensor:
    """The start offsets of every micro-batch's rows, ``[micro_batches, batch_size]``: the same numbers
    as drawing ``batch_size`` offsets per micro-batch in turn from ``gen``."""
    return torch.randint(n_tokens - context - 1, (micro_batches, batch_size), generator=gen)


class LossTap:
    """Each step's loss, kept on the device; on CUDA copied to pinned host memory without blocking,
    and read only once its copy has finished: reporting progress never stalls the GPU."""

    def __init__(self, steps: int, device: str):
        self.cuda = torch.device(device).type == "cuda"
        self.values = torch.zeros(steps, pin_memory=self.cuda)
        self.events: list = []
        self.done = 0  # steps whose value can be read without waiting

    def put(self, step: int, loss: torch.Tensor) -> None:
        if self.cuda:
            self.values[step - 1].copy_(loss.detach(), non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            self.events.append(ev)
        else:
            self.values[step - 1] = loss.detach()
            self.done = step

    def latest(self) -> float:
        """The loss of the newest step whose value has reached the host (never waits)."""
        while self.cuda and self.done < len(self.events) and self.events[self.done].query():
            self.done += 1
        return float(self.values[self.done - 1]) if self.done else float("nan")

    def all(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            self.done = len(self.events)
        return self.values[: self.done].tolist()
