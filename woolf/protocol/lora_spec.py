"""How a participant asks for LoRA: ``r=R[,alpha=A][,targets=N+N][,dropout=P][,dtype=D][,ckpt=0][,base=nf4]...``.

Usage:
    spec = parse_lora("r=16,alpha=32,targets=c_attn+c_proj")   # LoraSpec(r=16, alpha=32.0, ...)
    parse_lora("off") is None                                  # no LoRA (a ledger default turned off)
    spec.scale                                                 # alpha / r, what the delta file carries

``woolf train --lora ...`` and the ledger default ``workload.params.lora`` take this text.
``targets`` are module names as peft matches them (``target_modules``: a name's last
component, e.g. c_attn, q_proj); none given: the workload's default (every linear layer but the output head).
``dtype``: the frozen base's compute dtype, ``auto`` (bf16 on a GPU; on a CPU the checkpoint's, bf16 or float32),
``bf16`` or ``fp32``. ``ckpt``: gradient checkpointing, on by default (activations recomputed in
the backward pass: ~30% more compute for a fraction of the activations' memory, the numbers
unchanged; at 152M on the CPU it is what keeps a LoRA run under 2 GiB: benchmarks/RESULTS.md §17);
``ckpt=0`` keeps every activation instead. ``base=nf4``: QLoRA, the frozen base's linear layers quantized to
4-bit NF4 through bitsandbytes (the factors are merged into the float32 masters like any LoRA PR's;
woolf/workloads/hf/qlora.py). ``alpha`` (> 0; left out: 2r) over r is the scale of the update B·A.
``lr_scale``: the adapters' learning rate is the workload's ``lr`` times this (``auto``: per layer,
workloads/lora.py ``auto_scale``). ``carry=1``: the adapters and their AdamW moments carried from one
contribution to the next (workloads/lora_carry.py). Standard library only (the config check may run
without torch).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

LORA_PARAM = "lora"  # the workload parameter (workload.params.lora) holding a ledger's default LoRA text
DTYPES = ("auto", "bf16", "fp32")
BASES = ("", "nf4")  # the frozen base as it is (its dtype), or quantized to 4-bit NF4 (QLoRA)
_TARGET = re.compile(r"^[A-Za-z0-9_.]{1,100}$")
_KEYS = ("r", "alpha", "targets", "dropout", "dtype", "ckpt", "base", "lr_scale", "carry")
_SYNTAX = ("expected r=R[,alpha=A][,targets=NAME+NAME][,dropout=P][,dtype=auto|bf16|fp32][,ckpt=1|0][,base=nf4]"
           "[,lr_scale=X|auto][,carry=1|0], e.g. r=16,alpha=32")


@dataclass(frozen=True)
class LoraSpec:
    r: int = 8  # rank of every factor pair
    alpha: float = 0.0  # scale numerator (parse_lora: 2r when left out; 0 here means that too)
    targets: tuple = ()  # peft target_modules; (): the workload's default (workloads/lora.py default_targets)
    dropout: float = 0.0  # lora_dropout
    dtype: str = "auto"  # the frozen base's compute dtype
    checkpointing: bool = True  # gradient checkpointing (ckpt=0: off)
    base: str = ""  # "nf4": the frozen base quantized to 4-bit NF4 (QLoRA)
    lr_scale: float | None = 1.0  # the adapters' learning rate: the workload's lr times this (None: auto)
    carry: bool = False  # the adapters and their AdamW moments carried from one contribution to the next

    @property
    def scale(self) -> float:
        return (self.alpha or 2.0 * self.r) / self.r

    def text(self, full: bool = False) -> str:
        """The spec as `--lora` takes it: the fields that differ from their defaults, or every one (``full``:
        what a recipe records, so a re-training does not depend on this version's defaults)."""
        parts = [f"r={self.r}", f"alpha={self.alpha or 2 * self.r:g}"]
        if self.targets:
            parts.append("targets=" + "+".join(self.targets))
        if self.dropout or full:
            parts.append(f"dropout={self.dropout:g}")
        if self.dtype != "auto" or full:
            parts.append(f"dtype={self.dtype}")
        if not self.checkpointing or full:
            parts.append(f"ckpt={int(self.checkpointing)}")
        if self.base:
            parts.append(f"base={self.base}")
        if self.lr_scale != LoraSpec.lr_scale or full:
            parts.append(f"lr_scale={'auto' if self.lr_scale is None else format(self.lr_scale, 'g')}")
        if self.carry != LoraSpec.carry or full:
            parts.append(f"carry={int(self.carry)}")
        return ",".join(parts)


def _number(text: str, key: str, kind):
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{key}={text!r} is not a number ({_SYNTAX})") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{key}={text!r} is not finite")
    return value


def parse_lora(text: str) -> LoraSpec | None:
    """The spec, or None for ``off``/``none``/empty; ValueError with a one-line reason otherwise."""
    text = (text or "").strip()
    if text.lower() in ("", "off", "none"):
        return None
    fields: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key in fields or key not in _KEYS:
            raise ValueError(f"{text[:80]!r}: {_SYNTAX}")
        fields[key] = value.strip()
    if "r" not in fields:
        raise ValueError(f"{text[:80]!r}: the rank r is required ({_SYNTAX})")
    r = _number(fields["r"], "r", int)
    alpha = _number(fields.get("alpha", str(2 * r)), "alpha", float)
    dropout = _number(fields.get("dropout", "0"), "dropout", float)
    targets = tuple(t for t in fields.get("targets", "").split("+") if t)
    dtype = fields.get("dtype", "auto")
    if not 1 <= r <= 4096:
        raise ValueError(f"r={r}: use a rank in [1, 4096]")
    if not 0 < alpha / r <= 1024:
        raise ValueError(f"alpha={alpha:g}: use alpha > 0 with alpha/r <= 1024 (leave it out for 2r)")
    scale_text = fields.get("lr_scale", "auto" if LoraSpec.lr_scale is None else str(LoraSpec.lr_scale))
    lr_scale = None if scale_text == "auto" else _number(scale_text, "lr_scale", float)
    if lr_scale is not None and not 0 < lr_scale <= 1000:
        raise ValueError(f"lr_scale={lr_scale:g}: use a positive number (at most 1000), the factor on the "
                         "workload's learning rate")
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout={dropout:g}: use a probability in [0, 1)")
    if bad := [t for t in targets if not _TARGET.match(t)]:
        raise ValueError(f"targets: {bad[0][:40]!r} is not a module name (letters, digits, _ and .)")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: use one of {', '.join(DTYPES)}")
    if fields.get("base", "") not in BASES:
        raise ValueError(f"base={fields['base'][:20]!r}: use base=nf4 (a 4-bit frozen base), or leave it out")
    flags = {}
    for key in ("ckpt", "carry"):
        default = "1" if getattr(LoraSpec, {"ckpt": "checkpointing"}.get(key, key)) else "0"
        if fields.get(key, default) not in ("0", "1"):
            raise ValueError(f"{key}={fields[key]!r}: use 0 or 1")
        flags[key] = fields.get(key, default) == "1"
    return LoraSpec(r, alpha, targets, dropout, dtype, flags["ckpt"], fields.get("base", ""), lr_scale, flags["carry"])
