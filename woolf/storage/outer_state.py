"""The outer (merge-rule) state of a version as a safetensors file beside the weights.

Usage:
    data = state_bytes(state)                           # deterministic bytes; sha256 goes in the trailers
    save_state(state, path)
    state = load_state(path, model_spec, rule, limits)  # checked: names, shapes, dtypes, count, finite

Layout: tensors ``momentum/<name>`` (and ``buffer/<name>`` for buffered rules),
float32, one per floating tensor of the model; one metadata key ``woolf``
holding ``{"count": N, "rule": "..."}`` (one key, so the bytes are deterministic).
Never pickle.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from woolf.core.merge_rules import OuterState, Rule
from woolf.errors import IntegrityError
from woolf.storage.files import write_bytes_atomic
from woolf.storage.weights import Spec, check_finite, read_spec


def _tensors(state: OuterState) -> dict[str, torch.Tensor]:
    out = {f"momentum/{n}": t.contiguous() for n, t in (state.momentum or {}).items()}
    out.update({f"buffer/{n}": t.contiguous() for n, t in (state.buffer or {}).items()})
    return out


def state_bytes(state: OuterState) -> bytes:
    # ONE metadata key: safetensors writes its metadata map in hash order, so two keys would
    # make the bytes (and the recorded sha256) differ from run to run
    meta = json.dumps({"count": state.count, "rule": state.rule}, sort_keys=True, separators=(",", ":"))
    return save(_tensors(state), metadata={"woolf": meta})


def save_state(state: OuterState, path: Path) -> bytes:
    data = state_bytes(state)
    write_bytes_atomic(data, Path(path))
    return data


def expected_spec(model_spec: Spec, rule: str) -> Spec:
    floats = {n: s for n, (d, s) in model_spec.items() if d in ("F64", "F32", "F16", "BF16")}
    out = {f"momentum/{n}": ("F32", s) for n, s in floats.items()}
    if rule != "nesterov":
        out.update({f"buffer/{n}": ("F32", s) for n, s in floats.items()})
    return out


def load_state(path: Path, model_spec: Spec, limits, label: str = "outer state") -> OuterState:
    """The state in ``path``, refused with IntegrityError if it does not fit the model."""
    try:
        spec = read_spec(Path(path), limits, label)
        with safe_open(str(path), framework="pt") as fh:
            raw = (fh.metadata() or {}).get("woolf", "")
            try:
                meta = json.loads(raw) if len(raw) < 1000 else None
            except json.JSONDecodeError:
                meta = None
            if not isinstance(meta, dict):
                raise IntegrityError(f"{label}: no woolf metadata (rule and buffer count)")
            rule, count = meta.get("rule"), meta.get("count")
            try:
                Rule(kind=rule)
            except (ValueError, TypeError):
                raise IntegrityError(f"{label}: names no known merge rule ({rule!r})") from None
            if type(count) is not int or not 0 <= count <= 1024:
                raise IntegrityError(f"{label}: buffer count {count!r} is not a count")
            want = expected_spec(model_spec, rule)
            if spec != want:
                missing = sorted(set(want) - set(spec))[:3]
                extra = sorted(set(spec) - set(want))[:3]
                bad = sorted(n for n in set(want) & set(spec) if want[n] != spec[n])[:3]
                raise IntegrityError(f"{label}: does not fit the model (missing {missing}, unexpected "
                                     f"{extra}, wrong shape or dtype {bad})")
            tensors = {k: fh.get_tensor(k) for k in spec}
    except SafetensorError as exc:
        raise IntegrityError(f"{label}: safetensors refused the file: {exc}") from None
    except IntegrityError:
        raise
    except Exception as exc:  # InvalidWeightsError from the header checks
        message = getattr(exc, "message", str(exc))
        raise IntegrityError(f"{label}: {message}") from None
    try:
        check_finite(tensors, label)
    except Exception as exc:
        raise IntegrityError(getattr(exc, "message", str(exc))) from None
    momentum = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith("momentum/")}
    buffer = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith("buffer/")}
    return OuterState(rule, count, momentum, buffer if rule != "nesterov" else None)
