"""Canonical digests of training state: what a proof of training commits to (pure arithmetic, no I/O).

Usage:
    h = tensor_digest(t)                        # 32 bytes: dtype, shape and raw bytes of one tensor
    c = component_digest({"w": t1, "b": t2})    # 64 hex: a named set of tensors, in name order
    parts = split_components(state)             # {"params": {...}, "opt": {...}, "data": {...}, "rng": {...}}
    digests = {name: component_digest(ts) for name, ts in parts.items()}

A state is a flat dict of tensors named ``<component>/<rest>`` (``params/blocks.0.qkv.weight``,
``opt/exp_avg/blocks.0.qkv.weight``, ``data``, ``rng/r0/cpu``; woolf/workloads/proof.py builds it).
A tensor's digest is sha256 over its dtype's name, its shape and its bytes in memory order
(contiguous, little-endian: the byte order of every machine torch runs on here), so the same values
give the same digest on any device, process or thread count; a component's digest is sha256 over
its tensors' names and digests in sorted name order. Hashing a tensor reads it once (large tensors
release the GIL while hashed).
"""

from __future__ import annotations

import hashlib
import sys

import torch

from woolf.protocol.proof import COMPONENT_PREFIX

if sys.byteorder != "little":  # the digests name bytes in memory order: define them once, for every machine
    raise ImportError("woolf's training proofs are defined on little-endian machines")


def tensor_digest(t: torch.Tensor) -> bytes:
    """sha256 of a tensor's dtype, shape and bytes (moved to the CPU and made contiguous first)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    flat = t.contiguous().reshape(-1)
    h = hashlib.sha256(f"{str(t.dtype).removeprefix('torch.')}:{tuple(t.shape)}\0".encode())
    if flat.numel():
        h.update(memoryview(flat.view(torch.uint8).numpy()).cast("B"))
    return h.digest()


def component_digest(tensors: dict[str, torch.Tensor]) -> str:
    """One component's digest: its tensors' names and digests in name order (64 hex)."""
    h = hashlib.sha256(COMPONENT_PREFIX)
    for name in sorted(tensors):
        h.update(name.encode() + b"\0" + tensor_digest(tensors[name]))
    return h.hexdigest()


def split_components(state: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """A flat state's tensors by component (the name's first part; ``data`` stands alone)."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in state.items():
        comp, _, rest = name.partition("/")
        out.setdefault(comp, {})[rest or comp] = t
    return out


def digests(state: dict[str, torch.Tensor], components: tuple[str, ...]) -> dict[str, str]:
    """{component: digest} for each of ``components`` (an absent one is the digest of nothing)."""
    parts = split_components(state)
    return {c: component_digest(parts.get(c, {})) for c in components}


def relative_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], origin: dict[str, torch.Tensor]) -> float:
    """|a - b| / |b - origin| over the tensors of ``b`` (float64 sums): how far a replay's end is from a
    declared end, against how far the segment moved. inf when the names or shapes differ."""
    if sorted(a) != sorted(b) or sorted(b) != sorted(origin):
        return float("inf")
    diff = moved = 0.0
    for k in b:
        x, y, o = (t.detach().to("cpu", torch.float64) for t in (a[k], b[k], origin[k]))
        if x.shape != y.shape or y.shape != o.shape:
            return float("inf")
        diff += float(((x - y) ** 2).sum())
        moved += float(((y - o) ** 2).sum())
    if moved <= 0:
        return 0.0 if diff == 0 else float("inf")
    return (diff / moved) ** 0.5
