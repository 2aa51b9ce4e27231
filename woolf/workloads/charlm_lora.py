"""LoRA training for the built-in `charlm` workload, with peft: what `woolf demo --lora R` runs.

Usage (CharLM.train_lora calls this; woolf/participant/lora.py calls that):
    factors, summary = train_lora(wl, weights, data, steps, parse_lora("r=4"), device="cpu", seed=0)
    factors["blocks.0.qkv.weight"]      # (A: r x in, B: out x r, scale = alpha / r)

The version's weights are loaded into a TinyGPT and frozen; peft (``LoraConfig``,
``get_peft_model``, which wraps any torch module given ``target_modules``) adds adapters to
the spec's targets, by default every linear layer of the blocks (``DEFAULT_TARGETS``: qkv,
proj and the MLP's two layers; the output head, the embeddings and the LayerNorms stay frozen,
as in common LoRA practice). AdamW (fresh for each contribution: the adapters are new each time,
their product is merged into the full weights, as ReLoRA does) trains the adapters alone for
``steps`` steps at the workload's learning rate, with the workload's own ramp for a fresh
optimizer (``optimizer_warmup``) capped at a third of the steps (a fresh adapter starts at
B = 0, so the first steps' update is small; the full 60-step ramp of the continued regimes would
leave a 15-step contribution at a quarter of the rate: benchmarks/RESULTS.md §17b). The factors
come back per target TENSOR in the delta file's convention B·A = update (woolf/storage/lora.py).

charlm computes in float32 on every device (``dtype=bf16`` is refused with the reason) and keeps every
activation: ``ckpt`` (gradient checkpointing, on by default for the transformers workload) does
nothing here, where a 137k-parameter model's activations are a few MB.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import Linear as LoraLinear
from peft.tuners.lora import LoraLayer

from woolf.errors import UsageError
from woolf.protocol.lora_spec import LoraSpec
from woolf.workloads.base import TrainData
from woolf.workloads.charlm import LORA_TARGETS as DEFAULT_TARGETS


def _check(spec: LoraSpec) -> None:
    if spec.dtype == "bf16":
        raise UsageError(f"--lora {spec.text()}: charlm trains in float32", hint="drop dtype=bf16")


def _factors(model, owner: dict[int, str]) -> dict:
    """{target tensor: (A, B, scale)} from the peft model's adapters, A = lora_A (r x in), B = lora_B (out x r)."""
    out = {}
    for mod_name, m in model.named_modules():
        if not isinstance(m, LoraLayer):
            continue
        if not isinstance(m, LoraLinear):
            raise UsageError(f"LoRA target {mod_name!r} is a {type(m).__name__}; only linear layers are LoRA "
                             f"targets", hint=f"name linear modules: targets={'+'.join(DEFAULT_TARGETS)}")
        tensor = owner[id(m.get_base_layer().weight)]
        a = m.lora_A["default"].weight.detach().to("cpu", torch.float32).contiguous()
        b = m.lora_B["default"].weight.detach().to("cpu", torch.float32).contiguous()
        out[tensor] = (a, b, float(m.scaling["default"]))
    return out


def lr_factor(wl, step: int, steps: int) -> float:
    """The workload's ramp for a fresh optimizer, over at most a third of this contribution's steps."""
    ramp = min(wl.optimizer_warmup, max(1, steps // 3)) if wl.optimizer_warmup else 0
    return (step + 1) / ramp if step < ramp else 1.0


def train_lora(wl, weights: dict, data: TrainData, steps: int, spec: LoraSpec, device: str = "cpu",
               seed: int = 0, progress=None, proof=None) -> tuple[dict, dict]:
    """({target tensor: (A, B, scale)}, summary) after ``steps`` AdamW steps on the adapters alone. ``proof``:
    the hook that commits to the adapters' path or replays a segment of it (woolf/workloads/proof.py)."""
    _check(spec)
    gen = torch.Generator().manual_seed(seed)
    batches = wl.batches(data, gen)
    torch.manual_seed(seed)  # the adapters' initialisation
    model = wl.load_model(weights, device)
    model.requires_grad_(False)
    owner = {id(p): n for n, p in model.named_parameters()}
    targets = list(spec.targets or DEFAULT_TARGETS)
    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha or 2 * spec.r, lora_dropout=spec.dropout,
                     target_modules=targets, bias="none")
    try:
        model = get_peft_model(model, cfg)
    except ValueError as exc:  # peft: a target that names no module
        raise UsageError(f"--lora {spec.text()}: {str(exc).splitlines()[0][:160]}",
                         hint=f"charlm's linear modules: {', '.join(DEFAULT_TARGETS)}, head") from None
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=wl.lr, weight_decay=0.0)
    first, last, _ = (proof.begin({n: p for n, p in model.named_parameters() if p.requires_grad}, opt, gen, 0,
                                  steps, device) if proof else (0, steps, 0))
    t0, losses = time.perf_counter(), []
    for step in range(first + 1, last + 1):
        for group in opt.param_groups:
            group["lr"] = wl.lr_at(step - 1) * lr_factor(wl, step - 1, steps)
        x, y = (t.to(device) for t in next(batches))
        loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        if proof:
            proof.step(step, loss, gnorm)
        if progress:
            progress(step, steps, losses[-1])
    secs = time.perf_counter() - t0
    factors = _factors(model, owner)
    trainable = sum(p.numel() for p in params)
    tail = losses[-max(1, steps // 5):]
    return factors, {"steps": steps, "seconds": round(secs, 3), "train_loss": sum(tail) / len(tail),
                     "tokens": steps * wl.batch_size * wl.context, "data": data.source,
                     "optimizer": "fresh (lora)", "device": device,
                     "lora": {"spec": spec.text(), "targets": len(factors), "trainable": trainable,
                              "dtype": "float32"}}
