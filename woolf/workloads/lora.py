"""One LoRA trainer for every workload, with peft: adapters over the frozen version, factors per target tensor.

Usage (a workload's ``train_lora`` calls this; woolf/participant/lora.py calls that):
    factors, summary = train_lora(wl, weights, data, steps, parse_lora("r=4"), device="cpu", seed=0)
    factors["blocks.0.qkv.weight"]      # (A: r x in, B: out x r, scale = alpha / r)

A workload that trains LoRA (features.py: ``LORA``) supplies its model, its batches and its loss:

    wl.lora_model(weights, device, dtype)   # the architecture with the version's weights as its
                                            # parameters, in ``dtype`` on ``device``, frozen
    wl.lora_batches(data, gen)              # an iterator of micro-batches (tuples of tensors) drawn from gen
    wl.lora_loss(model, batch)              # the scalar loss of one micro-batch
    wl.LORA_TARGETS                         # default targets (None: every linear layer but the output head)
    wl.LORA_BF16                            # False: the workload computes in float32 on every device
    wl.LORA_NF4                             # True: lora_model(..., base="nf4") quantizes the base (QLoRA)
    wl.lr, wl.lr_at(step), wl.optimizer_warmup, wl.batch_size, wl.context, wl.grad_accum (default 1),
    wl.weight_decay (default 0)

and this module does the rest, the same for all: peft (``LoraConfig``, ``get_peft_model``) adds
adapters to the spec's targets (none named: every linear layer but the output head); AdamW (fresh
for each contribution: the adapters are new each time, their product is merged into the full
weights, as ReLoRA does; ``carry=1``: the participant's last A and moments, lora_carry.py) trains
them alone for ``steps`` steps of ``grad_accum`` micro-batches at the workload's learning rate
times ``lr_scale`` (per layer with ``lr_scale=auto``), with the workload's ramp for
a fresh optimizer (``optimizer_warmup``) capped at a third of the steps (a fresh adapter starts at
B = 0, so the first steps' update is small; the full 60-step ramp of the continued regimes would
leave a 15-step contribution at a quarter of the rate: benchmarks/RESULTS.md §17b). The factors
come back per target TENSOR of the model (the ledger's names) in the delta file's convention
B·A = update in the tensor's own shape (woolf/storage/kinds/lora_file.py): a GPT-2 Conv1D stores its weight
transposed (peft's ``fan_in_fan_out``), so its pair is sent transposed (A := lora_B^T,
B := lora_A^T). Only linear layers (Linear, Conv1D) are targets; an embedding or a tied tensor is
refused with the name. The model and its adapters are dropped before returning: memory is the
weights, one compute-dtype model, the adapters and their moments.

Compute dtype (``spec.dtype``): auto = bf16 on a GPU; on a CPU the checkpoint's own dtype (``wl.stored_dtype``:
bf16 for a bf16 checkpoint, else float32), unless the workload
computes in float32 only (``LORA_BF16 = False``: charlm, whose ``dtype=bf16`` is refused with the
reason). ``ckpt`` (gradient checkpointing) applies to a model that offers it (transformers').
"""

from __future__ import annotations

import gc
import time
import warnings

import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import Linear as LoraLinear
from peft.tuners.lora import LoraLayer

from woolf.errors import UsageError
from woolf.protocol.lora_spec import LoraSpec
from woolf.workloads import lora_carry
from woolf.workloads.base import TrainData, enable_checkpointing, train_summary
from woolf.workloads.lora_carry import AdapterState


def compute_dtype(wl, spec: LoraSpec, device: str) -> torch.dtype:
    """The frozen base's compute dtype for ``spec`` on ``device``; a workload without bf16 refuses it."""
    if not getattr(wl, "LORA_BF16", True):
        if spec.dtype == "bf16":
            raise UsageError(f"--lora {spec.text()}: {wl.name} trains in float32", hint="drop dtype=bf16")
        return torch.float32
    if spec.dtype == "bf16" or (spec.dtype == "auto" and torch.device(device).type == "cuda"):
        return torch.bfloat16
    if spec.dtype == "auto":  # the checkpoint's own dtype: a bf16 checkpoint's base stays 2 bytes per parameter
        return getattr(wl, "stored_dtype", torch.float32)
    return torch.float32


def lr_factor(wl, step: int, steps: int) -> float:
    """The workload's ramp for a fresh optimizer, over at most a third of this contribution's steps."""
    warmup = getattr(wl, "optimizer_warmup", 0)
    ramp = min(warmup, max(1, steps // 3)) if warmup else 0
    return (step + 1) / ramp if step < ramp else 1.0


def linear_names(model) -> list[str]:
    """The model's linear layers (Linear, transformers' Conv1D) by module name: what ``targets`` can name."""
    kinds = (torch.nn.Linear,)
    try:
        from transformers.pytorch_utils import Conv1D  # deferred: transformers (GPT-2's linear layers)

        kinds += (Conv1D,)
    except ImportError:  # charlm alone, without transformers: torch's Linear only
        pass
    return [n for n, m in model.named_modules() if isinstance(m, kinds)]


def _width(m) -> int:
    """The layer's smaller dimension: a Linear's features (a 4-bit Linear4bit's weight is packed, N/2 x 1
    bytes, so its shape says nothing), else the weight's shape (transformers' Conv1D)."""
    if isinstance(m, torch.nn.Linear):
        return min(m.in_features, m.out_features)
    return min(m.weight.shape)


def check_targets(model, spec: LoraSpec, targets: list[str] | None) -> None:
    """Before training: every named target matches a linear layer of the model (peft's rule: the module's
    name, or its last components), and the rank fits each matched layer; one line listing the model's
    linear layers otherwise."""
    linear = {n: m for n, m in model.named_modules() if n in set(linear_names(model))}
    for target in targets or ():
        named = [n for n, _ in model.named_modules() if n == target or n.endswith("." + target)]
        if not named:
            raise UsageError(f"--lora {spec.text()}: target {target!r} matches no layer of the model",
                             hint=_hint(model))
        if not any(n in linear for n in named):
            kind = type(dict(model.named_modules())[named[0]]).__name__
            raise UsageError(f"--lora {spec.text()}: target {target!r} is a {kind}; only linear layers are LoRA "
                             "targets", hint=_hint(model))
    for name, m in linear.items():
        if targets and not any(name == t or name.endswith("." + t) for t in targets):
            continue
        width = _width(m)
        if spec.r > width:
            raise UsageError(f"--lora {spec.text()}: rank {spec.r} is above the width {width} of layer {name!r} "
                             f"(a rank-{width} update is all it can hold)", hint=f"use r <= {width}")


def _factors(model, owner: dict[int, str], hint: str) -> dict:
    """{target tensor: (A, B, scale)} from the peft model's adapters, in the delta file's convention."""
    out = {}
    for mod_name, m in model.named_modules():
        if not isinstance(m, LoraLayer):
            continue
        if not (isinstance(m, LoraLinear) or type(m).__module__ == "peft.tuners.lora.bnb"):  # bnb: QLoRA's
            raise UsageError(f"LoRA target {mod_name!r} is a {type(m).__name__}; only linear layers are LoRA "
                             f"targets", hint=hint)
        tensor = owner.get(id(m.get_base_layer().weight))
        if tensor is None:
            raise UsageError(f"LoRA target {mod_name!r}: its weight is not one of the ledger's tensors (tied?)")
        a = m.lora_A["default"].weight.detach().to("cpu", torch.float32).contiguous()
        b = m.lora_B["default"].weight.detach().to("cpu", torch.float32).contiguous()
        scale = float(m.scaling["default"])
        out[tensor] = (b.t().contiguous(), a.t().contiguous(), scale) if m.fan_in_fan_out else (a, b, scale)
    if not out:
        raise UsageError("LoRA training found no target module", hint=hint)
    return out


def auto_scale(fan_in: int, spec: LoraSpec) -> float:
    """``lr_scale=auto`` for a layer of ``fan_in`` inputs: the rate at which an adapter's first steps move its
    layer's weights as much as full training's AdamW steps do. With B = 0 and A at peft's initialisation
    (entries of RMS 1/sqrt(3 fan_in)), B's sign-like steps of size lr make B·A·scale move each weight by
    about lr * scale * sqrt(r / (3 fan_in)); full training moves it by lr. So: sqrt(3 fan_in / r) / scale
    (137k-parameter charlm, scale 2: 1.7 at r = 16, 3.5 at r = 4; a 4096-wide layer at r = 16: 14, the
    "about 10x, 15x for short runs" the field measures: benchmarks/RESULTS.md §17b)."""
    return (3 * fan_in / spec.r) ** 0.5 / spec.scale


def _groups(params: list, slots: dict, spec: LoraSpec) -> list[dict]:
    """AdamW's parameter groups, each with its ``scale`` on the workload's rate: one group at ``lr_scale``,
    or with ``lr_scale=auto`` one per fan-in (a layer's A and B share its scale)."""
    if spec.lr_scale is not None:
        return [{"params": params, "scale": spec.lr_scale}]
    fan_in = {}
    for key, p in slots.items():
        if key.endswith(".lora_A"):
            fan_in[id(p)] = fan_in[id(slots[key[:-1] + "B"])] = p.shape[1]
    groups: dict[float, list] = {}
    for p in params:
        groups.setdefault(auto_scale(fan_in[id(p)], spec) if id(p) in fan_in else 1.0, []).append(p)
    return [{"params": ps, "scale": scale} for scale, ps in sorted(groups.items())]


def _hint(model) -> str:
    names = linear_names(model)
    shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    return f"name the model's linear layers in --lora targets=NAME+NAME: {shown}"


def default_targets(wl, model) -> list[str]:
    """The targets when ``--lora`` names none: the workload's ``LORA_TARGETS``, else every linear layer but
    the output head (the attention and the MLP: LoRA on the MLP is what lets it match full training)."""
    if getattr(wl, "LORA_TARGETS", None):
        return list(wl.LORA_TARGETS)
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    modules = dict(model.named_modules())
    return [n for n in linear_names(model) if modules[n] is not out]


def _adapted(wl, model, spec: LoraSpec, seed: int):
    """The peft model: adapters on ``spec``'s targets (the workload's default when none are named),
    initialised from ``seed`` alone; the targets checked first."""
    targets = list(spec.targets) or default_targets(wl, model)
    check_targets(model, spec, targets)
    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha or 2 * spec.r, lora_dropout=spec.dropout,
                     target_modules=targets, bias="none")
    try:
        with warnings.catch_warnings():
            # GPT-2's Conv1D: peft sets fan_in_fan_out itself, and said so on every run
            warnings.filterwarnings("ignore", message="fan_in_fan_out is set to False", category=UserWarning)
            return get_peft_model(model, cfg)
    except ValueError as exc:  # peft: target modules not found, or no default for this architecture
        raise UsageError(f"--lora {spec.text()}: {str(exc).splitlines()[0][:200]}", hint=_hint(model)) from None


def train_lora(wl, weights: dict, data: TrainData, steps: int, spec: LoraSpec, device: str = "cpu",
               seed: int = 0, progress=None, keep: list | None = None,
               state: AdapterState | None = None, proof=None) -> tuple[dict, dict]:
    """({target tensor: (A, B, scale)}, summary) after ``steps`` AdamW steps on the adapters alone. ``proof``:
    the hook that commits to the adapters' path or replays a segment of it (woolf/workloads/proof.py); a run
    that starts from carried adapters records none (its start is not the seed's adapters: unverifiable).

    ``state`` (AdapterState): the adapters and moments to start from (empty: fresh), replaced by those at
    the end; None: fresh, nothing kept.

    ``weights`` may be consumed by the workload's ``lora_model`` (the transformers workload casts it IN
    PLACE to the compute dtype where it differs, and empties it when the model lives on another device:
    the caller reads the version's weights again for the arithmetic of record, woolf/participant/lora.py).
    ``keep`` (a list): the trained peft model is appended to it, in eval mode, instead of being dropped (a
    QLoRA run evaluates its quantized base with the adapters attached: participant/lora_weights.py)."""
    gen = torch.Generator().manual_seed(seed)
    batches = wl.lora_batches(data, gen)
    dtype = compute_dtype(wl, spec, device)
    names = set(weights)
    torch.manual_seed(seed)  # the adapters' initialisation: from the seed (and a model built from it)
    model = wl.lora_model(weights, device, dtype, **({"base": spec.base} if spec.base else {}))
    owner = {id(p): n for n, p in model.named_parameters(remove_duplicate=True) if n in names}
    hint = _hint(model)
    if spec.checkpointing and hasattr(model, "gradient_checkpointing_enable"):
        # activations recomputed in the backward pass: less memory, ~30% more compute
        enable_checkpointing(model)
    model = _adapted(wl, model, spec, seed)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    slots = lora_carry.slots(model, owner)
    opt = torch.optim.AdamW(_groups(params, slots, spec), lr=wl.lr, weight_decay=getattr(wl, "weight_decay", 0.0))
    carried = state.steps if state is not None and state.tensors else 0
    kind, accum = torch.device(device).type, getattr(wl, "grad_accum", 1)
    if carried:
        lora_carry.restore(state, slots, opt, spec)  # (a module attribute: the study swaps it)
        proof = None
    first, last, _ = (proof.begin({n: p for n, p in model.named_parameters() if p.requires_grad}, opt, gen, 0,
                                  steps, device) if proof else (0, steps, 0))
    t0, losses = time.perf_counter(), []
    for step in range(first + 1, last + 1):
        for group in opt.param_groups:  # the ramp counts the carried optimizer's steps: it warms up once
            group["lr"] = wl.lr_at(step - 1) * group["scale"] * lr_factor(wl, carried + step - 1, steps)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(accum):
            batch = tuple(t.to(device) for t in next(batches))
            with torch.autocast(kind, dtype=dtype, enabled=dtype != torch.float32):
                loss = wl.lora_loss(model, batch)
            loss = loss / accum if accum > 1 else loss
            loss.backward()
            total += loss.item()
            del loss  # not kept through the next micro-batch's forward pass
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(total)
        if proof:  # the loss as float32 bits: the same whether it was one micro-batch or a sum of several
            proof.step(step, torch.tensor(total, dtype=torch.float32), gnorm)
        if progress:
            progress(step, steps, total)
    secs = time.perf_counter() - t0
    if state is not None:
        state.tensors = lora_carry.capture(slots, opt)
    factors = _factors(model, owner, hint)
    trainable = sum(p.numel() for p in params)
    ckpt = hasattr(model.get_base_model(), "gradient_checkpointing_enable")
    if keep is not None:
        keep.append(model.eval())
    del model, opt, params
    gc.collect()  # peft's wrappers hold cycles: the adapters and their moments go now, not later
    lora = {"spec": spec.text(), "targets": len(factors), "trainable": trainable,
            **({"checkpointing": spec.checkpointing} if ckpt else {}), "dtype": str(dtype).replace("torch.", ""),
            **({"base": spec.base} if spec.base else {})}
    return factors, train_summary(steps, secs, losses, steps * accum * wl.batch_size * wl.context, data,
                                  optimizer=f"carried (lora, step {carried})" if carried else "fresh (lora)",
                                  device=device, lora=lora)
