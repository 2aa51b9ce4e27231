"""A participant's LoRA adapters and their AdamW moments, carried from one contribution to the next (``carry=1``).

Usage (workloads/lora.py's ``train_lora`` calls these when it is given a state):
    state = AdapterState()                          # empty: the first contribution starts fresh
    slots = slots(model, owner)                     # {"T.lora_A": parameter, "T.lora_B": parameter}
    restore(state, slots, opt, spec)                # before training: A and the moments carried, B zero
    state.tensors = capture(slots, opt)             # after: what the next contribution starts from

Re-basing: each contribution's product is merged into the version the next one trains on, so the
next starts with B = 0 (the model exactly at the new version) and the carried A and moments. A state
that does not fit the model (other targets, another rank) is refused with one line before any step.
participant/lora_state.py keeps it on disk between contributions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from peft.tuners.lora import LoraLayer

from woolf.errors import UsageError
from woolf.protocol.lora_spec import LoraSpec

CARRY_HINT = "start fresh adapters: `woolf train --fresh`"


@dataclass
class AdapterState:
    """A participant's adapters and their AdamW moments carried from one contribution to the next.

    ``tensors`` (empty: start fresh) holds, per target tensor T of the model, ``T.lora_A`` and
    ``T.lora_B`` (peft's own orientation) and their moments ``exp_avg/T.lora_A``, ``exp_avg_sq/...``,
    and the optimizer's step count ``step``; ``train_lora`` reads it at the start and replaces it with
    the state at the end. Re-based onto each new version: A and the moments carry over, B starts at
    zero, so the model starts exactly at the new version (the last product is merged in it already)."""

    tensors: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.tensors["step"]) if "step" in self.tensors else 0


def slots(model, owner: dict[int, str]) -> dict:
    """{"T.lora_A": parameter, "T.lora_B": parameter} for every adapted target tensor T."""
    out = {}
    for m in model.modules():
        if isinstance(m, LoraLayer) and id(m.get_base_layer().weight) in owner:  # Linear, Conv1D, QLoRA's 4-bit
            tensor = owner[id(m.get_base_layer().weight)]
            out[f"{tensor}.lora_A"], out[f"{tensor}.lora_B"] = m.lora_A["default"].weight, m.lora_B["default"].weight
    return out


def restore(state: AdapterState, slots: dict, opt, spec: LoraSpec) -> None:
    """Start from ``state`` (re-based: A and the moments carried, B zero); UsageError when it does not fit."""
    keys = {k for k in state.tensors if "/" not in k and k != "step"}
    if keys != set(slots):
        raise UsageError(f"--lora {spec.text()}: the carried adapters are for other targets "
                         f"({len(keys) // 2} tensors, these are {len(slots) // 2})", hint=CARRY_HINT)
    with torch.no_grad():
        for key, p in slots.items():
            moments = {m: state.tensors.get(f"{m}/{key}") for m in ("exp_avg", "exp_avg_sq")}
            if any(t is None or t.shape != p.shape for t in (state.tensors[key], *moments.values())):
                raise UsageError(f"--lora {spec.text()}: the carried adapter {key} is "
                                 f"{list(state.tensors[key].shape)}, this rank needs {list(p.shape)}",
                                 hint=CARRY_HINT)
            if key.endswith(".lora_A"):
                p.copy_(state.tensors[key])
            else:
                p.zero_()
            opt.state[p] = {"step": state.tensors["step"].clone().float(),
                            **{m: t.to(p.device, p.dtype).clone() for m, t in moments.items()}}


def capture(slots: dict, opt) -> dict:
    """The state at the end of training: every slot and its moments, in float32 on the CPU, and the step."""
    out = {}
    for key, p in slots.items():
        out[key] = p.detach().to("cpu", torch.float32).clone()
        for m in ("exp_avg", "exp_avg_sq"):
            out[f"{m}/{key}"] = opt.state[p][m].detach().to("cpu", torch.float32).clone()
        out["step"] = torch.tensor(float(opt.state[p]["step"]), dtype=torch.float32)
    return out
