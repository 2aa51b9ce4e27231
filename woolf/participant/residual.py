"""A participant's compression residual: what top-k dropped from a delta rides along in the next one.

Usage:
    parts, residual, note, went_in = compress_with_feedback(ledger, delta, spec, model_spec)   # compressed
    ... the PR is open ...
    keep_residual(ledger, residual)                                       # only after the submission succeeded
    spec = compression_spec(cfg, "topk:0.02,bits:2")                      # None: dense; checked against delta.accept

Error feedback as Templar and SparseLoCo run it: ``e = residual + delta``;
the participant sends ``C(e)`` and keeps ``e - expand(C(e))`` in
``.woolf/state/compress/residual.safetensors`` (float32, the model's names and
shapes, the compression's text in its one metadata key). It shares the
participant's local state (woolf/participant/state.py ``state_dir``): never uploaded,
and ``woolf train --fresh`` removes it. A file that does not fit the model
(another model, shapes, dtypes, non-finite values, unreadable) is renamed
aside with the reason in ``note`` and never mixed in; a residual made under
another compression setting is still the same dropped work and is used.
"""

from __future__ import annotations

import time
from pathlib import Path

from woolf.errors import UsageError
from woolf.participant.state import state_dir
from woolf.protocol.compress_spec import CompressSpec, compress_kind, parse_spec
from woolf.storage import kinds
from woolf.storage.files import write_bytes_atomic

FILE = "residual.safetensors"


def _path(ledger) -> Path:
    return state_dir(ledger) / "compress" / FILE


def _set_aside(path: Path, why: str) -> str:
    aside = path.with_name(f"{path.name}.set-aside-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9}")
    path.replace(aside)
    return f"compression residual set aside ({why}): {aside.name}"


def load_residual(ledger, model_spec: dict) -> tuple[dict | None, str]:
    """(the kept residual or None, a note when one was set aside)."""
    import torch  # deferred: torch
    from safetensors import safe_open  # deferred: safetensors
    path = _path(ledger)
    if not path.exists():
        return None, ""
    try:
        with safe_open(str(path), framework="pt") as fh:
            names = set(fh.keys())
            if names != set(model_spec):
                return None, _set_aside(path, "its tensors are not this model's")
            out = {}
            for name in sorted(names):
                sl = fh.get_slice(name)
                if sl.get_dtype() != "F32" or tuple(sl.get_shape()) != tuple(model_spec[name][1]):
                    return None, _set_aside(path, f"{name} does not fit the model")
                out[name] = fh.get_tensor(name)
                if not bool(torch.isfinite(out[name]).all()):
                    return None, _set_aside(path, f"{name} is not finite")
    except Exception as exc:  # any unreadable file is set aside, never trusted
        return None, _set_aside(path, f"unreadable: {str(exc)[:80]}")
    return out, ""


def compress_with_feedback(ledger, delta: dict, spec: CompressSpec, model_spec: dict,
                           feedback: bool = True):
    """(parts to send, the residual to keep, a note, the residual added): ``delta`` plus the kept residual,
    compressed; the residual added is what a proof of training binds the delta to (participant/proof.py)."""
    import torch  # deferred: torch

    from woolf.core.compress import compress, expand  # deferred: loads torch
    residual, note = load_residual(ledger, model_spec) if feedback else (None, "")
    total = {k: v.to(torch.float32) + (residual[k] if residual is not None else 0.0) for k, v in delta.items()}
    parts = compress(total, spec)
    sent = expand(parts, spec, model_spec, {k: v.dtype for k, v in delta.items()})  # as the validator expands it
    kept = {k: total[k] - sent[k].to(torch.float32) for k in total} if feedback else None
    if residual is not None:
        note = (note + "; " if note else "") + "carried the compression residual"
    return parts, kept, note, residual


def keep_residual(ledger, residual: dict | None, spec: CompressSpec | None = None) -> None:
    path = _path(ledger)
    if residual is None:
        return
    from safetensors.torch import save  # deferred: safetensors
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"compress": spec.text()} if spec is not None else None
    write_bytes_atomic(save({k: v.contiguous() for k, v in residual.items()}, metadata=meta), path)


def compression_spec(cfg, text: str | None):
    """The CompressSpec to send with (None: dense), checked against what the ledger accepts."""
    text = cfg.delta.compress if text is None else text
    try:
        spec = parse_spec(text)
    except ValueError as exc:
        raise UsageError(f"--compress {text!r}: {exc}", hint="e.g. --compress topk:0.02,bits:2, or dense") from None
    kind = kinds.get(compress_kind(spec))
    if not kind.accepted_by(cfg.delta.accept):
        accepted = ", ".join(cfg.delta.accept)
        raise UsageError(f"this ledger does not accept {kind.name} deltas (delta.accept: {accepted})",
                         hint=f"--compress {cfg.delta.compress}")
    return spec
