"""The transformers workload's training loop: one model in memory, no per-step host syncs, torchrun-aware.

Usage:
    model = uninitialised(config, torch.float32)          # the architecture, its parameters never written
    model = assign(model, weights, device, copy=False)   # the model's parameters ARE the given tensors
    model = frozen(config, weights, device, torch.bfloat16)   # LoRA's frozen base in the compute dtype
    rows = batch_rows(len(ids), context, steps * grad_accum, batch_size, generator)   # all batches, drawn once
    tap = LossTap(steps, device); tap.put(step, loss); tap.latest()   # read without waiting on the device
    losses, secs, resumed, amp = fit(wl, model, ids, steps, ...)   # the loop of Transformers.train (hf/workload.py)
    sharded = use_fsdp(model, device)   # FSDP2 rather than DDP under torchrun; out_of_memory(wl, ...): its error

Memory: a model whose parameters are about to be assigned is built uninitialised
(transformers' random initialisation would touch a second model's worth of memory);
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

import contextlib
import os
import resource
import time

import torch
import torch.nn.functional as F

from woolf.errors import TrainingFailed, UsageError
from woolf.workloads.base import apply_follow
from woolf.workloads.optstate import load_optimizer, save_optimizer

AUTOCAST = {"": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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

    Floating tensors become the model's own dtype (float32, or an evaluation's bf16); one that already is,
    on ``device``, is used as it is unless ``copy``: training then writes into the caller's tensors. Tied
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
            new = tensor.to(device=device, dtype=old.dtype, copy=copy)  # the model's own dtype
            if isinstance(old, torch.nn.Parameter):
                new = torch.nn.Parameter(new, requires_grad=old.requires_grad)
            for mod, attr, is_param in owners[id(old)]:
                (mod._parameters if is_param else mod._buffers)[attr] = new
    return model.to(device)  # what the weights do not hold (non-persistent buffers) follows


def frozen(config, weights: dict, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """The architecture with ``weights`` as its parameters in ``dtype`` on ``device``, frozen: LoRA's base
    (workloads/lora.py). ``weights`` is cast IN PLACE, one tensor at a time, where its dtype differs (never
    the masters beside a cast model), and emptied when the model holds copies of them on another device
    (given there already, as participant/lora_weights.py ``lora_base`` places them, they are its parameters). A
    tensor already in ``dtype`` on ``device`` IS the parameter (no copy); the model is built uninitialised
    (its own random weights would touch a second model's worth of memory)."""
    for name in sorted(weights):
        if weights[name].is_floating_point() and weights[name].dtype != dtype:
            weights[name] = weights[name].to(dtype)
    model = uninitialised(config, dtype)
    state = model.state_dict()
    if set(weights) - set(state):
        raise UsageError(f"weights are not this model's: unexpected {sorted(set(weights) - set(state))[:4]}")
    given = {k: t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype) for k, t in weights.items()}
    with torch.no_grad():
        model.load_state_dict(given, strict=False, assign=True)
        model.tie_weights()  # tied copies (lm_head of tied embeddings) point at the tensor they share
    held = {t.data_ptr() for t in given.values()}
    copied = any(given[k] is not weights[k] for k in given)
    del given, state
    loose = [n for n, t in model.named_parameters(remove_duplicate=False) if t.data_ptr() not in held]
    if loose:
        raise UsageError(f"weights are not this model's: missing {loose[:4]}")
    model.requires_grad_(False)
    if copied:  # copies on another device: the caller's go
        weights.clear()  # the caller reads the version's weights again (woolf/participant/lora.py)
    return model.to(device)


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


def out_of_memory(wl, device: str, params: int) -> TrainingFailed:
    """One line: where memory ran out, the peak measured, and what to lower."""
    if torch.device(device).type == "cuda":
        peak = f"{torch.cuda.max_memory_allocated(torch.device(device)) / 2**30:.2f} GiB of device memory"
        torch.cuda.empty_cache()
    else:
        peak = f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB of RSS"
    return TrainingFailed(
        f"out of memory training on {device} at a peak of {peak} ({params / 1e6:.1f}M parameters, "
        f"batch_size {wl.batch_size}, context {wl.context}, grad_accum {wl.grad_accum}); "
        "nothing was saved",
        hint="lower workload.params.batch_size (raise grad_accum to keep the batch) or context, "
             "set workload.params.checkpointing = true, or spread the model over GPUs (--nproc N: FSDP2)")


def use_fsdp(model: torch.nn.Module, device: str) -> bool:
    """FSDP2 instead of DDP: when WOOLF_FSDP=1, or on CUDA when the weights, gradients and AdamW's
    moments (16 bytes per parameter) would take more than 80% of one device."""
    if os.environ.get("WOOLF_FSDP") == "1":
        return True
    if torch.device(device).type != "cuda":
        return False
    n = sum(p.numel() for p in model.parameters())
    return 16 * n > 0.8 * torch.cuda.get_device_properties(torch.device(device)).total_memory


def fit(wl, model, ids, steps, device, seed, progress, state_dir, global_step, follow, follow_every, par,
        sharded, proof=None):
    """The loop of ``wl.train`` (hf/workload.py); returns (losses, seconds, how the optimizer started,
    autocast dtype). The optimizer and the gradients are gone when it returns. ``proof``: the hook of
    woolf/workloads/proof.py (a sharded run records none: its optimizer state is not whole on one rank)."""
    kind = torch.device(device).type
    net = par.wrap(model, device, sharded, frozenset(getattr(model, "_no_split_modules", None) or ())) \
        if par else model
    fwd = torch.compile(net) if wl.compile else net
    opt = torch.optim.AdamW(model.parameters(), lr=wl.lr, weight_decay=wl.weight_decay,
                            fused=True if kind == "cuda" else None)
    keep = state_dir is not None and not sharded  # a sharded optimizer's state is not kept
    resumed = load_optimizer(opt, model, state_dir, wl.fingerprint()) if keep else \
        ("fresh" if not sharded else "fresh (sharded: not kept)")
    done = int(next(iter(opt.state.values()), {}).get("step", 0)) if opt.state else 0  # optimizer warm-up
    amp = AUTOCAST[wl.autocast]
    if amp is torch.float16 and kind != "cuda":
        amp = None  # fp16 autocast is for GPUs; a CPU participant trains in float32
    scaler = torch.amp.GradScaler("cuda") if amp is torch.float16 else None
    gen = torch.Generator().manual_seed(seed)
    rows = batch_rows(len(ids), wl.context, steps * wl.grad_accum, wl.batch_size, gen)
    mine = par.share(wl.batch_size) if par else slice(None)
    rows, tokens = rows[:, mine].contiguous().to(device), ids.to(device)
    span = torch.arange(wl.context + 1, device=device)
    share = (mine.stop - mine.start) / wl.batch_size * (par.world if par else 1) if par else 1.0
    tap = LossTap(steps, device)
    proof = None if sharded else proof
    first, last, done = (proof.begin(dict(model.named_parameters()), opt, gen, done, steps, device) if proof
                         else (0, steps, done))
    t0 = time.perf_counter()
    for step in range(first + 1, last + 1):
        for group in opt.param_groups:
            # the ramp is at most a third of this contribution: 4-step contributions under a 60-step ramp ran
            # every step at 2-20% of the rate, and a new user's merges barely moved the model
            group["lr"] = wl.lr_at(global_step + step - 1) * wl.opt_factor(done + step - 1, cap=max(1, steps // 3))
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for m in range(wl.grad_accum):
            window = tokens[rows[(step - 1) * wl.grad_accum + m][:, None] + span]
            quiet = par and not sharded and m < wl.grad_accum - 1
            with net.no_sync() if quiet else contextlib.nullcontext(), \
                    torch.autocast(kind, dtype=amp or torch.float32, enabled=amp is not None):
                logits = fwd(input_ids=window[:, :-1]).logits
                loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                       window[:, 1:].reshape(-1)) / wl.grad_accum
                # each rank's mean weighted by its share of the rows; DDP averages over ranks
                (scaler.scale(loss * share) if scaler else loss * share).backward()
            total += loss.detach() * share / (par.world if par else 1)
            del logits, loss
        if par:
            torch.distributed.all_reduce(total)
        if scaler:
            scaler.unscale_(opt)
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        tap.put(step, total)
        apply_follow(model, follow, follow_every, step, steps)
        if proof:
            proof.step(step, total, gnorm)
        if progress:
            progress(step, steps, tap.latest())
    opt.zero_grad(set_to_none=True)  # the gradients go before anything is written
    losses = tap.all()
    secs = time.perf_counter() - t0
    if keep and (par is None or par.rank == 0):
        save_optimizer(opt, model, state_dir, wl.fingerprint())
    return losses, secs, resumed, amp
