"""Merge rules with state: how an accepted delta becomes the next version (pure arithmetic).

Usage:
    rule = Rule.from_config(cfg.merge)                     # or Rule.from_record(kind, params)
    step = merge_step(rule, current, state, delta, attenuation=0.5)
    step.candidate                                         # the next version's weights
    step.state                                             # the next version's outer state (None: none kept)
    step.probe                                             # what the gate evaluates (see below)

Rules (Flower's strategies in miniature: the same step, different state):

- ``attenuated`` (the seed's rule, no state):
  ``candidate = current + alpha * f(s) * delta``.
- ``nesterov`` (DiLoCo's outer Nesterov applied per merge, the delta as the
  negative outer gradient): ``m = mu*m + g``, ``candidate = current + lr*(g + mu*m)``
  with ``g = alpha * f(s) * delta``.
- ``delayed_nesterov`` (Liu et al. 2024): every merge applies ``lr * g / N``
  and adds ``g`` to a buffer; every N-th merge also updates the momentum from
  the buffered mean, ``m = mu*m + buffer/N``, and applies ``lr * mu * m``. Over
  N merges this is one Nesterov step on the mean delta.
- ``fedbuff`` (Nguyen et al. 2022): ``g`` waits in the buffer; every N-th merge
  applies ``lr * (mu*m + buffer/N)`` with ``m = mu*m + buffer/N`` (``mu = 0`` is
  plain FedBuff with a server learning rate). The weights change only then.

The gate judges exactly the candidate that would become the version, except
for a FedBuff merge that only buffers (the weights do not change): then it
judges the delta on its own, ``probe = current + alpha * f(s) * delta``, so a
harmful delta is refused before it can reach the buffer.

Every auditor must get the same bytes: each tensor is computed in float32 on
the CPU as separately rounded IEEE element-wise operations (no fused
multiply-add, no reductions); every scalar is rounded to float32 once (core/scale.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from woolf.core.scale import delta_scale, f32

RULES = ("attenuated", "nesterov", "delayed_nesterov", "fedbuff")
STATEFUL = ("nesterov", "delayed_nesterov", "fedbuff")


@dataclass(frozen=True)
class Rule:
    kind: str = "attenuated"
    alpha: float = 1.0  # alpha_base: scale of every delta before the rule sees it
    outer_lr: float = 0.7
    momentum: float = 0.9
    buffer: int = 4  # N: merges per momentum update (delayed_nesterov) or per applied step (fedbuff)

    def __post_init__(self):
        if self.kind not in RULES:
            raise ValueError(f"unknown merge rule {self.kind!r}; use one of {', '.join(RULES)}")
        if self.buffer < 1:
            raise ValueError("merge.buffer must be >= 1")

    @classmethod
    def from_config(cls, merge_cfg) -> Rule:
        return cls(merge_cfg.rule, merge_cfg.alpha_base, merge_cfg.outer_lr, merge_cfg.momentum,
                   merge_cfg.buffer)

    @property
    def stateful(self) -> bool:
        return self.kind in STATEFUL

    def params(self) -> dict:
        """What a version records so that the audit recomputes it under this exact rule."""
        if not self.stateful:
            return {}
        out = {"outer_lr": self.outer_lr, "momentum": self.momentum}
        if self.kind != "nesterov":
            out["buffer"] = self.buffer
        return out

    @classmethod
    def from_record(cls, kind: str | None, alpha: float, params: dict | None) -> Rule:
        """The rule a version recorded in its trailers (a version without one used `attenuated`)."""
        params = params or {}
        defaults = cls()
        return cls(kind or "attenuated", alpha, float(params.get("outer_lr", defaults.outer_lr)),
                   float(params.get("momentum", defaults.momentum)),
                   int(params.get("buffer", defaults.buffer)))


@dataclass
class OuterState:
    """Merge state that is part of a version: momentum, buffer, and the buffer's count."""

    rule: str
    count: int = 0
    momentum: dict[str, torch.Tensor] | None = None
    buffer: dict[str, torch.Tensor] | None = None


@dataclass
class Step:
    candidate: dict[str, torch.Tensor]
    state: OuterState | None
    probe: dict[str, torch.Tensor]  # what the gate evaluates
    applied: bool  # did the weights change (False: a FedBuff merge that only buffered)
    scale: float  # the float32 factor on this delta in the weights now (0 when only buffered)


def _float_names(current: dict[str, torch.Tensor]) -> list[str]:
    return [n for n in sorted(current) if current[n].is_floating_point()]


def _axpy(y: torch.Tensor, a: float, x: torch.Tensor, reuse: bool = False) -> torch.Tensor:
    """y + a*x as two rounded float32 operations (a already float32).

    ``reuse``: x's own memory receives the result when x is float32 and contiguous
    (the same two operations, so the same bits; x is overwritten).
    """
    if reuse and x.dtype == torch.float32 and x.is_contiguous():
        out = torch.mul(x, torch.tensor(a, dtype=torch.float32), out=x)
        out.add_(y.to(torch.float32))
        return out
    out = torch.mul(x.to(torch.float32), torch.tensor(a, dtype=torch.float32))
    out.add_(y.to(torch.float32))
    return out


def _scaled(x: torch.Tensor, a: float) -> torch.Tensor:
    return torch.mul(x.to(torch.float32), torch.tensor(a, dtype=torch.float32))


def _apply(current: dict[str, torch.Tensor], step: dict[str, torch.Tensor], a: float,
           reuse: bool = False) -> dict:
    """current + a*step for every tensor in ``step`` (others copied), in current's dtypes.

    ``reuse``: ``step``'s tensors are overwritten with the result where they can hold it.
    """
    out = {}
    for name in sorted(current):
        cur = current[name]
        out[name] = _axpy(cur, a, step[name], reuse).to(cur.dtype).contiguous() if name in step else cur
    return out


def zero_state(rule: Rule, current: dict[str, torch.Tensor]) -> OuterState | None:
    if not rule.stateful:
        return None
    names = _float_names(current)
    z = {n: torch.zeros(current[n].shape, dtype=torch.float32) for n in names}
    buf = {n: torch.zeros(current[n].shape, dtype=torch.float32) for n in names}
    return OuterState(rule.kind, 0, z, buf if rule.kind != "nesterov" else None)


def carry_over(rule: Rule, previous: OuterState | None, current: dict[str, torch.Tensor]
               ) -> tuple[dict[str, torch.Tensor], OuterState | None]:
    """(weights, state) to merge on when the config's rule may differ from the parent's state.

    Same rule: the state is kept (a changed N keeps the buffer; a full one flushes
    at the next merge). Another rule: the new rule starts from zero state, after a
    FedBuff buffer that still holds accepted deltas is applied (nothing accepted is lost).
    """
    if previous is not None and previous.rule == rule.kind:
        return current, previous
    if previous is not None and previous.rule == "fedbuff" and previous.count > 0 and previous.buffer:
        mean = {n: _scaled(b, f32(1.0 / previous.count)) for n, b in previous.buffer.items()}
        current = _apply(current, mean, f32(rule.outer_lr if rule.stateful else 1.0))
    return current, zero_state(rule, current)


def merge_step(rule: Rule, current: dict[str, torch.Tensor], state: OuterState | None,
               delta: dict[str, torch.Tensor], attenuation: float, reuse_delta: bool = False) -> Step:
    """One accepted delta under ``rule``; ``state`` is the parent version's outer state.

    ``reuse_delta``: the caller drops ``delta`` afterwards, so the attenuated rule writes
    the candidate into its memory (one model-sized tensor less; the same bits).
    """
    if set(current) != set(delta):
        raise ValueError("current and delta name different tensors")
    g_scale = delta_scale(rule.alpha, attenuation)
    if rule.kind == "attenuated":
        cand = _apply(current, delta, g_scale, reuse=reuse_delta)
        return Step(cand, None, cand, True, g_scale)
    current, state = carry_over(rule, state, current)
    assert state is not None and state.momentum is not None
    names = _float_names(current)
    lr, mu = f32(rule.outer_lr), f32(rule.momentum)
    g = {n: _scaled(delta[n], g_scale) for n in names}  # the outer (negative) gradient
    if rule.kind == "nesterov":
        m = {n: _axpy(g[n], mu, state.momentum[n]) for n in names}  # mu*m + g
        look = {n: _axpy(g[n], mu, m[n]) for n in names}  # g + mu*m
        cand = _apply(current, look, lr)
        return Step(cand, OuterState(rule.kind, 0, m, None), cand, True, f32(lr * g_scale))
    assert state.buffer is not None
    buf = {n: torch.add(state.buffer[n], g[n]) for n in names}
    count = state.count + 1
    flush = count >= rule.buffer
    inv = f32(1.0 / count)
    if rule.kind == "delayed_nesterov":
        cand = _apply(current, g, f32(lr / rule.buffer))
        if not flush:
            return Step(cand, OuterState(rule.kind, count, state.momentum, buf), cand, True,
                        f32(lr / rule.buffer * g_scale))
        m = {n: _axpy(_scaled(buf[n], inv), mu, state.momentum[n]) for n in names}  # mu*m + mean
        cand = _apply(cand, m, f32(lr * mu))
        zero = {n: torch.zeros_like(buf[n]) for n in names}
        return Step(cand, OuterState(rule.kind, 0, m, zero), cand, True, f32(lr / rule.buffer * g_scale))
    # fedbuff
    if not flush:
        probe = _apply(current, delta, g_scale)
        return Step(current, OuterState(rule.kind, count, state.momentum, buf), probe, False, 0.0)
    m = {n: _axpy(_scaled(buf[n], inv), mu, state.momentum[n]) for n in names}  # mu*m + mean
    cand = _apply(current, m, lr)
    zero = {n: torch.zeros_like(buf[n]) for n in names}
    return Step(cand, OuterState(rule.kind, 0, m, zero), cand, True, f32(lr * inv * g_scale))
