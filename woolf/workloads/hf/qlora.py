"""QLoRA's frozen base: a transformers model whose linear layers are 4-bit NF4 (bitsandbytes), built a tensor at a time.

Usage (the transformers workload's ``lora_model(..., base="nf4")`` calls this; workloads/lora.py trains on it):
    problem = nf4_problem("cpu")        # None where bitsandbytes quantizes here, else one line saying why not
    model = frozen_nf4(config, masters, "cpu", torch.bfloat16)   # masters: {name: float32 tensor}, read lazily

Every ``torch.nn.Linear`` of the model but its output head becomes a bitsandbytes ``Linear4bit`` (NF4,
computing in ``dtype``); embeddings, norms and the head stay in ``dtype``. The model is built
uninitialised (no page of it written) and each tensor of ``masters`` is read, cast and quantized in
turn, so memory is the quantized model plus one float32 tensor, never the model in bf16 (a mapping
that reads on access, storage/lazy.py ``LazyTensors``, keeps the float32 masters out of memory too).
peft then puts its LoRA layers over the ``Linear4bit`` modules (peft.tuners.lora.bnb); the adapters
are trained against the dequantized NF4 weights and merged by the validator into the float32 masters
like any LoRA PR's factors. A model with no ``torch.nn.Linear`` to quantize (GPT-2's ``Conv1D``) is
refused with one line, and so is a machine where bitsandbytes is missing or cannot quantize.
"""

from __future__ import annotations

import logging
import os

import torch

from woolf.errors import UsageError
from woolf.workloads.hf.modeldir import canonical
from woolf.workloads.hf.training import assign, uninitialised

INSTALL = "pip install 'goodwoolf[qlora]' (bitsandbytes)"


def _bnb():
    """bitsandbytes, its import-time chatter about optional kernels quieted; ImportError when absent."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # forced: bitsandbytes asks the Hub for a CPU kernel otherwise
    for name in ("bitsandbytes", "kernels"):  # "kernel not in the local cache" warnings: it falls back itself
        logging.getLogger(name).setLevel(logging.ERROR)
    import bitsandbytes  # deferred: bitsandbytes (optional: the qlora extra)

    return bitsandbytes


def nf4_problem(device: str, config=None) -> str | None:
    """None when bitsandbytes quantizes a linear layer to NF4 on ``device`` and runs it, and the model of
    ``config`` (when given) has linear layers to quantize; else why not, one line."""
    if config is not None:
        problem = _no_linears(uninitialised(config, torch.bfloat16), config)  # no page of it is written
        if problem:
            return problem
    try:
        bnb = _bnb()
    except ImportError:
        return f"--lora base=nf4 needs bitsandbytes, which is not installed: {INSTALL}"
    except Exception as exc:  # noqa: BLE001 - a broken install fails its own import in many ways
        return f"--lora base=nf4: bitsandbytes fails to load here ({type(exc).__name__}: {str(exc)[:160]})"
    try:
        layer = _quantized(bnb, torch.nn.Linear(64, 64, bias=False), torch.zeros(64, 64, dtype=torch.bfloat16),
                           device, torch.bfloat16)
        layer(torch.zeros(1, 64, dtype=torch.bfloat16, device=device))
    except Exception as exc:  # noqa: BLE001 - a build without this device's kernels: said, nothing changes
        return (f"--lora base=nf4: bitsandbytes {getattr(bnb, '__version__', '?')} cannot quantize to NF4 on "
                f"{device} here ({type(exc).__name__}: {str(exc)[:160]}); train without base=nf4")
    return None


def _quantized(bnb, linear: torch.nn.Linear, weight: torch.Tensor, device: str, dtype: torch.dtype):
    """A ``Linear4bit`` (NF4) in place of ``linear``, its weight ``weight`` quantized on ``device``."""
    q = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                          compute_dtype=dtype, quant_type="nf4", device="meta")
    q.weight = bnb.nn.Params4bit(weight.to(dtype), requires_grad=False, quant_type="nf4")
    if linear.bias is not None:
        q.bias = linear.bias
    return q.to(device)  # Params4bit quantizes as it moves


def _linears(model) -> dict[str, str]:
    """{weight tensor name: module name} of the linear layers NF4 takes: every torch Linear but the output head."""
    head = model.get_output_embeddings()
    return {f"{n}.weight": n for n, m in model.named_modules() if type(m) is torch.nn.Linear and m is not head}


def _no_linears(model, config) -> str | None:
    if _linears(model):
        return None
    kinds = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__
                    or "Conv1D" in type(m).__name__})
    return (f"--lora base=nf4: bitsandbytes quantizes torch Linear layers; this {config.model_type} model's "
            f"layers are {', '.join(kinds) or 'not linear'}: train without base=nf4")


def frozen_nf4(config, masters, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """The architecture with ``masters`` (canonical names, read one at a time) as its frozen weights, every
    linear layer but the output head quantized to NF4; the rest in ``dtype``. See the module docstring."""
    bnb = _bnb()
    model = uninitialised(config, dtype)
    names = set(canonical(model))
    if set(masters) != names:
        raise UsageError("weights are not this model's: "
                         f"missing {sorted(names - set(masters))[:4]}, unexpected {sorted(set(masters) - names)[:4]}")
    modules = dict(model.named_modules())
    linears = _linears(model)
    problem = _no_linears(model, config)
    if problem:
        raise UsageError(problem, hint="train without base=nf4")
    with torch.no_grad():
        for name in sorted(masters):
            t = masters[name]
            t = t.to(dtype) if t.is_floating_point() else t
            if name in linears:
                path = linears[name]
                parent, _, attr = path.rpartition(".")
                q = _quantized(bnb, modules[path], t, device, dtype)
                setattr(modules[parent] if parent else model, attr, q)
                modules[path] = q
            else:
                assign(model, {name: t}, device, copy=False)
            del t
    model.requires_grad_(False)
    return model.to(device)
