"""Delta kinds: one module per kind behind one interface (base.py), looked up by name here.

Usage:
    from woolf.storage import kinds
    kind = kinds.kind_for(declared)                   # submission.json's delta -> its DeltaKind
    kind = kinds.admitted(declared, cfg.delta.accept)  # ... when the ledger accepts it, exactly its fields
    kinds.get("topk"); kinds.names()                  # by name (UnknownKind for another); every name
    delta = kinds.load_delta(path, declared, model_spec, limits)   # its dense update (kind_for(...).load)
    kinds.LORA.accepted_by(cfg.delta.accept)           # ask a kind, never compare its name

Modules: base (DeltaKind: what every kind answers), dense, topk, lora (+ lora_file: its file format).
No module outside this package compares a kind's name (tests/test_kinds_rule.py holds it): callers
ask the kind. How to add a kind: docs/architecture.md, "How to add a delta kind". Importing this
package loads no torch or numpy (each kind defers its readers'), so admission and `woolf submit` can.
"""

from __future__ import annotations

from pathlib import Path

from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig
from woolf.storage.kinds.base import DeltaKind
from woolf.storage.kinds.dense import DenseKind
from woolf.storage.kinds.lora import LoraKind
from woolf.storage.kinds.topk import TopkKind

REGISTRY: dict[str, DeltaKind] = {}


class UnknownKind(InvalidWeightsError):
    """A delta declares a kind no module here implements."""


def register(kind: DeltaKind) -> DeltaKind:
    REGISTRY[kind.name] = kind
    return kind


DENSE = register(DenseKind())
TOPK = register(TopkKind())
LORA = register(LoraKind())

# every kind's declared parameters, in registry order (admission's allowed fields of submission.json's delta)
PARAMS: tuple[str, ...] = tuple(p for k in REGISTRY.values() for p in k.params)


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name, label: str = "delta") -> DeltaKind:
    """The kind called ``name``; UnknownKind (an InvalidWeightsError: one line) for any other value."""
    kind = REGISTRY.get(name) if isinstance(name, str) else None
    if kind is None:
        raise UnknownKind(f"{label}: unknown delta kind {str(name)[:40]!r}")
    return kind


def kind_for(declared: dict, label: str = "delta") -> DeltaKind:
    """The kind submission.json's ``delta`` object declares."""
    return get(declared.get("kind"), label)


def admitted(declared: dict, accept) -> DeltaKind:
    """Admission's rule: the declared kind is one ``accept`` (delta.accept) lists, with exactly its fields;
    else InvalidWeightsError, its message the PR's rejection."""
    name = declared.get("kind")
    if name not in accept or name not in REGISTRY:
        raise InvalidWeightsError(f"delta kind {str(name)[:40]!r} is not accepted by this ledger "
                                  f"(delta.accept: {', '.join(accept)})")
    kind = REGISTRY[name]
    kind.check_declared(declared, PARAMS)
    return kind


def load_delta(path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta",
               finite: bool = True, on_block=None):
    """The dense update of the delta file at ``path``, as ``declared`` (its kind's ``load``)."""
    return kind_for(declared, label).load(path, declared, model_spec, limits, label, finite, on_block)
