"""Version N from version N-1 and its delta: open, clip, the parent's merge state, merge, in one place.

Usage:
    delta = open_delta(path, declared, spec, limits)            # a merged delta: its kind's dense update
    state = parent_state(ledger, parent, spec)                  # the parent version's outer state, or None
    rule = recorded_rule(v)                                     # the rule and parameters version v recorded
    step = transition(rule, weights, state, delta, v.attenuation or 0.0, clip=v.delta_clip)
    step.candidate; step.state                                  # version N's weights and outer state

The validator's candidate (validator/step.py), the audit's recomputation (audit/recompute.py)
and rebuild (ledger/retention/rebuild.py) all merge through ``transition``: the same bits
for the same inputs. A dense delta read tensor by tensor (storage/lazy.py LazyTensors)
under the attenuated rule is merged in place: each delta tensor receives
``current + scale * delta`` and replaces current's tensor (``merge_in_place``), so the
weights and one tensor beside them are all the memory it takes. Otherwise merge_step
writes the candidate into the delta's memory. ``weights`` and ``delta`` are not to be
used afterwards either way.
"""

from __future__ import annotations

from pathlib import Path

import torch

from woolf.core.merge_rules import Rule, Step, merge_step
from woolf.core.scale import delta_scale
from woolf.core.scores import clip_delta
from woolf.protocol.config import LimitsConfig
from woolf.storage.kinds import kind_for
from woolf.storage.lazy import LazyTensors
from woolf.storage.outer_state import load_state


def open_delta(path: Path, declared: dict, spec: dict, limits: LimitsConfig, label: str = "delta"):
    """A merged delta's file as its kind opens it (storage/kinds/): a dense one read tensor by tensor
    (LazyTensors), a compressed one expanded, a lora one a LoraTensors whose targets expand when read."""
    return kind_for(declared, label).open(path, declared, spec, limits, label)


def clipped(delta, scale: float):
    """``delta`` times ``scale`` as scores.clip_delta computes it: a lazy delta's later reads, else a copy."""
    if isinstance(delta, LazyTensors):
        delta.clip(scale)
        return delta
    return clip_delta(delta, scale)


def parent_state(ledger, version, spec: dict, label: str = "outer state"):
    """The outer state ``version`` keeps (a rule with state), checked against the model's ``spec``; None
    when it keeps none. IntegrityError/StorageError when it is missing or does not fit."""
    path = ledger.state_path(version)
    return None if path is None else load_state(path, spec, ledger.config.limits, label)


def recorded_rule(v) -> Rule:
    """The merge rule and parameters version ``v`` recorded in its trailers (ValueError/TypeError if bad)."""
    return Rule.from_record(v.rule, v.alpha or 0.0, v.rule_params)


def streamable(rule: Rule, current: dict, delta) -> bool:
    """The attenuated rule on float32 weights with a lazily read float32 delta: ``merge_in_place`` applies."""
    return (rule.kind == "attenuated" and isinstance(delta, LazyTensors) and set(current) == set(delta)
            and all(v.dtype == torch.float32 and v.is_contiguous() and delta.dtype_of(k) == torch.float32
                    for k, v in current.items()))


def merge_in_place(rule: Rule, current: dict, delta: LazyTensors, attenuation: float) -> Step:
    """merge_step's Step, one tensor at a time: each delta tensor, read into one reused buffer, is
    scaled there (merge_step's rounded ``scale * delta``) and added into current's tensor: ``current +
    scale * delta`` with merge_step's two roundings (float addition commutes: the same bits, tests
    compare). ``current``'s tensors become the candidate's, in their own memory (no fresh
    tensor per read, whose page faults cost as much as the read); peak memory is the weights and one
    tensor beside them (validator and audit alike). Nothing else may hold current's tensors."""
    scale = delta_scale(rule.alpha, attenuation)
    factor = torch.tensor(scale, dtype=torch.float32)
    buf = delta.scratch()
    for name in sorted(current):
        d = delta.read_into(name, buf)
        current[name].add_(torch.mul(d, factor, out=d))
    return Step(current, None, current, True, scale)


def transition(rule: Rule, current: dict, state, delta, attenuation: float, clip: float | None = None,
               in_place: bool = True) -> Step:
    """The next version's Step: ``delta`` clipped by ``clip`` (scoring.norm_action = clip; None: as it
    is), then merged on ``current`` and the parent's ``state`` under ``rule``. ``in_place``: current's
    memory receives the candidate where it can (``streamable``: the attenuated rule ignores any
    state); else the delta's does. The same bits either way."""
    if clip is not None:
        delta = clipped(delta, clip)
    if in_place and streamable(rule, current, delta):
        return merge_in_place(rule, current, delta, attenuation)
    return merge_step(rule, current, state, delta, attenuation, reuse_delta=True)
