"""Deterministic merge arithmetic: candidate = current + scale * delta.

Usage:
    scale = delta_scale(alpha_base, attenuation)        # woolf/core/scale.py: float32, rounded once
    candidate = apply_delta(current, delta, scale)      # dict[str, Tensor]
    delta = compute_delta(trained, base)

Every auditor must get the same bytes: each tensor is computed in float32 on
the CPU, as two separately rounded IEEE operations (a multiply, then an add),
so no fused multiply-add or reduction order can change the result; the scale
is rounded to float32 once, by the caller (core/scale.py).
"""

from __future__ import annotations

import torch


def apply_delta(
    current: dict[str, torch.Tensor], delta: dict[str, torch.Tensor], scale: float
) -> dict[str, torch.Tensor]:
    if set(current) != set(delta):
        raise ValueError("current and delta name different tensors")
    scale_t = torch.tensor(scale, dtype=torch.float32)
    out = {}
    for name in sorted(current):
        cur = current[name]
        step = torch.mul(delta[name].to(torch.float32), scale_t)  # rounded once
        step.add_(cur.to(torch.float32))  # then the add, in place (IEEE addition commutes exactly)
        out[name] = step.to(cur.dtype).contiguous()
    return out


def compute_delta(
    trained: dict[str, torch.Tensor], base: dict[str, torch.Tensor],
    into: dict[str, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """trained - base per tensor, in the base's dtype (float32 arithmetic).

    ``into`` (normally ``trained`` itself, when the caller drops it): a float32
    contiguous tensor there of the right shape receives the result in place, the
    same single rounded subtraction, so no second model-sized tensor is made.
    """
    if set(trained) != set(base):
        raise ValueError("trained and base name different tensors")
    out = {}
    for name in sorted(base):
        b, t = base[name], trained[name]
        buf = None if into is None else into.get(name)
        if (buf is not None and b.dtype == torch.float32 and t.dtype == torch.float32
                and buf.dtype == torch.float32 and buf.shape == b.shape and buf.is_contiguous()):
            out[name] = torch.sub(t, b, out=buf)
        else:
            out[name] = torch.sub(t.to(torch.float32), b.to(torch.float32)).to(b.dtype).contiguous()
    return out
