"""LoRA training for the `transformers` workload with peft: factor pairs over frozen version weights.

Usage (Transformers.train_lora calls this; woolf/participant/lora.py calls that):
    factors, summary = train_lora(wl, weights, data, steps, parse_lora("r=4"), device="cpu")
    factors["transformer.h.0.attn.c_attn.weight"]      # (A: r x cols, B: rows x r, scale = alpha/r)

A model of the architecture is built without initialising it (``no_init_weights``: no memory is
touched) in the compute dtype (``spec.dtype``: auto = bf16 on a GPU, float32 on a CPU); the
version's weights become its parameters, frozen (on the CPU in their own dtype: the same tensors,
no copy; woolf/participant/lora.py casts them to the compute dtype first), and peft (``LoraConfig``,
``get_peft_model``) adds adapters to ``spec.targets`` (peft's default for the architecture when
none are named). AdamW trains the adapters alone for ``steps`` steps of ``grad_accum``
micro-batches. The factors come back per target TENSOR of the model (the ledger's names), in
the delta file's convention B·A = update in the tensor's own shape (woolf/storage/lora.py): a
GPT-2 Conv1D stores its weight transposed (peft's fan_in_fan_out), so its pair is sent
transposed (A := lora_B^T, B := lora_A^T). Only linear layers (Linear, Conv1D) are targets;
an embedding or a tied tensor is refused with the name. The model and its adapters are dropped
before returning: memory is the weights, one compute-dtype model, the adapters and their moments.
"""

from __future__ import annotations

import gc
import time

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import Linear as LoraLinear
from peft.tuners.lora import LoraLayer
from transformers import PreTrainedModel

from woolf.errors import UsageError
from woolf.protocol.lora_spec import LoraSpec
from woolf.workloads.base import TrainData
from woolf.workloads.hf.training import uninitialised


def compute_dtype(spec: LoraSpec, device: str) -> torch.dtype:
    if spec.dtype == "bf16" or (spec.dtype == "auto" and torch.device(device).type == "cuda"):
        return torch.bfloat16
    return torch.float32


def _frozen_model(wl, weights: dict, device: str, dtype: torch.dtype) -> PreTrainedModel:
    """The architecture with ``weights`` as its parameters in ``dtype`` on ``device``, frozen. A tensor
    already in ``dtype`` on ``device`` IS the parameter (no copy); the model is built uninitialised
    (``no_init_weights``: its own random weights would touch a second model's worth of memory)."""
    model = uninitialised(wl.config, dtype)
    state = model.state_dict()
    if set(weights) - set(state):
        raise UsageError(f"weights are not this model's: unexpected {sorted(set(weights) - set(state))[:4]}")
    given = {k: t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype) for k, t in weights.items()}
    with torch.no_grad():
        model.load_state_dict(given, strict=False, assign=True)
        model.tie_weights()  # tied copies (lm_head of tied embeddings) point at the tensor they share
    held = {t.data_ptr() for t in given.values()}
    del given, state
    loose = [n for n, t in model.named_parameters(remove_duplicate=False) if t.data_ptr() not in held]
    if loose:
        raise UsageError(f"weights are not this model's: missing {loose[:4]}")
    model.requires_grad_(False)
    return model.to(device)


def _factors(peft_model, owner: dict[int, str]) -> dict:
    out = {}
    for mod_name, m in peft_model.named_modules():
        if not isinstance(m, LoraLayer):
            continue
        if not isinstance(m, LoraLinear):
            raise UsageError(f"LoRA target {mod_name!r} is a {type(m).__name__}; only linear layers are LoRA targets",
                             hint="name linear modules in --lora targets=...")
        tensor = owner.get(id(m.get_base_layer().weight))
        if tensor is None:
            raise UsageError(f"LoRA target {mod_name!r}: its weight is not one of the ledger's tensors (tied?)")
        a = m.lora_A["default"].weight.detach().to("cpu", torch.float32)
        b = m.lora_B["default"].weight.detach().to("cpu", torch.float32)
        scale = float(m.scaling["default"])
        out[tensor] = (b.t().contiguous(), a.t().contiguous(), scale) if m.fan_in_fan_out else (a, b, scale)
    if not out:
        raise UsageError("LoRA training found no target module", hint="name modules in --lora targets=...")
    return out


def train_lora(wl, weights: dict, data: TrainData, steps: int, spec: LoraSpec, device: str = "cpu",
               seed: int = 0, progress=None, proof=None) -> tuple[dict, dict]:
    """({target tensor: (A, B, scale)}, summary) after ``steps`` AdamW steps on the adapters alone; ``proof``:
    the hook that commits to the adapters' path or replays a segment of it (woolf/workloads/proof.py).

    ``weights`` is consumed: cast IN PLACE to the compute dtype where it differs, and emptied when
    the model lives on another device (the caller reads the version's weights again for the
    arithmetic of record: woolf/participant/lora.py)."""
    ids = wl.tokens(data.texts)
    if len(ids) < wl.context + 2:
        raise UsageError(f"training data has {len(ids)} tokens; one window needs {wl.context + 2}")
    gen = torch.Generator().manual_seed(seed)
    dtype = compute_dtype(spec, device)
    wl._model = None  # the evaluation model's hold on the weights goes (rebuilt, uninitialised, when needed)
    for name in sorted(weights):  # in place, one tensor at a time: never the masters beside a cast model
        if weights[name].is_floating_point() and weights[name].dtype != dtype:
            weights[name] = weights[name].to(dtype)
    model = _frozen_model(wl, weights, device, dtype)
    if torch.device(device).type != "cpu":
        weights.clear()  # the model holds its own copies on the device: the host's go (the caller reads again)
    owner = {id(p): n for n, p in model.named_parameters(remove_duplicate=True) if n in weights}
    if spec.checkpointing:  # activations recomputed in the backward pass: less memory, ~30% more compute
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha or 2 * spec.r, lora_dropout=spec.dropout,
                     target_modules=list(spec.targets) or None, bias="none")
    try:
        torch.manual_seed(seed)  # the adapters' initialisation: from the seed alone (the model is built
        model = get_peft_model(model, cfg)  # uninitialised: nothing else draws from the generator)
    except ValueError as exc:  # peft: target modules not found, or no default for this architecture
        raise UsageError(f"--lora {spec.text()}: {str(exc).splitlines()[0][:200]}",
                         hint="name the model's linear modules: --lora r=8,targets=q_proj+v_proj") from None
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=wl.lr, weight_decay=wl.weight_decay)
    kind = torch.device(device).type
    first, last, _ = (proof.begin({n: p for n, p in model.named_parameters() if p.requires_grad}, opt, gen, 0,
                                  steps, device) if proof else (0, steps, 0))
    t0, losses = time.perf_counter(), []
    for step in range(first + 1, last + 1):
        for group in opt.param_groups:
            group["lr"] = wl.lr_at(step - 1)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(wl.grad_accum):
            ix = torch.randint(len(ids) - wl.context - 1, (wl.batch_size,), generator=gen)
            x = torch.stack([ids[i : i + wl.context] for i in ix]).to(device)
            y = torch.stack([ids[i + 1 : i + 1 + wl.context] for i in ix]).to(device)
            with torch.autocast(kind, dtype=dtype, enabled=dtype != torch.float32):
                logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1)) / wl.grad_accum
            loss.backward()
            total += loss.item()
            del logits, loss  # not kept through the next micro-batch's forward pass
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(total)
        if proof:
            proof.step(step, torch.tensor(total, dtype=torch.float32), gnorm)
        if progress:
            progress(step, steps, total)
    secs = time.perf_counter() - t0
    factors = _factors(model, owner)
    trainable = sum(p.numel() for p in params)
    del model, opt, params
    gc.collect()  # peft's wrappers hold cycles: the adapters and their moments go now, not later
    tail = losses[-max(1, steps // 5):]
    return factors, {"steps": steps, "seconds": round(secs, 3), "train_loss": sum(tail) / len(tail),
                     "tokens": steps * wl.grad_accum * wl.batch_size * wl.context, "data": data.source,
                     "optimizer": "fresh (lora)", "device": device,
                     "lora": {"spec": spec.text(), "targets": len(factors), "trainable": trainable,
                              "checkpointing": spec.checkpointing,
                              "dtype": str(dtype).replace("torch.", "")}}
