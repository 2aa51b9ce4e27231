"""Compressed deltas: chunked top-k with b-bit values, and their checked, exact expansion (pure arithmetic).

Usage:
    spec = parse_spec("topk:0.02,bits:2")           # CompressSpec(chunk=256, k=5, bits=2); None for "dense"
    parts = compress(delta, spec)                    # {"idx": U8/I16, "val": U8 (packed), "scale": BF16}
    dense = expand(parts, spec, model_spec)          # {name: float32 tensor}; ValueError naming the problem
    residual = delta - dense                         # error feedback: what compression dropped

Layout (Templar's chunked top-k, flattened): every tensor of the model, in sorted
name order, is flattened and cut into chunks of ``chunk`` elements (the last one
may be shorter, L elements). Each chunk keeps its ``min(k, L)`` largest-magnitude
elements: their offsets inside the chunk, strictly increasing (so a duplicate is
visible), and their values quantized to ``bits`` bits over ``[-s, s]`` with ``s``
the chunk's largest kept magnitude (levels ``(2q/(2^b-1) - 1) * s``, never 0).
All chunks of all tensors are concatenated into three 1-D tensors, so the
file's header stays a few hundred bytes whatever the model. Offsets are
uint8 when ``chunk <= 256`` (one byte per kept value) and int16 otherwise.

Everything the validator needs to know the exact shape of each part comes from
the model and the declared (chunk, k, bits): a file is checked against that
before any value is read, and nothing is expanded before every offset,
level and scale has passed. Expansion is element-wise float32 on the CPU with
one rounding per operation, so every auditor gets the same bytes.
"""

from __future__ import annotations

import math

import torch

from woolf.protocol.compress_spec import (  # noqa: F401 - re-exported: the spec is torch-free for the hub's hook
    BITS,
    DEFAULT_CHUNK,
    KINDS,
    MAX_CHUNK,
    MIN_CHUNK,
    CompressSpec,
    parse_spec,
    spec_from_declared,
)


def _layout(spec: CompressSpec, model_spec: dict) -> list[tuple[str, int, int, int]]:
    """(name, numel, chunks, kept) per tensor, in sorted name order."""
    out = []
    for name in sorted(model_spec):
        numel = math.prod(model_spec[name][1])
        chunks = -(-numel // spec.chunk)
        last = numel - (chunks - 1) * spec.chunk if chunks else 0
        kept = (chunks - 1) * spec.k + min(spec.k, last) if chunks else 0
        out.append((name, numel, chunks, kept))
    return out


def parts_spec(spec: CompressSpec, model_spec: dict) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The exact names, dtypes and shapes of a compressed file for this model: checked before reading."""
    rows = _layout(spec, model_spec)
    kept, chunks = sum(r[3] for r in rows), sum(r[2] for r in rows)
    return {"idx": ("U8" if spec.chunk <= 256 else "I16", (kept,)),
            "val": ("U8", (-(-kept * spec.bits // 8),)), "scale": ("BF16", (chunks,))}


def parts_bytes(spec: CompressSpec, model_spec: dict) -> int:
    sizes = {"U8": 1, "I16": 2, "BF16": 2}
    return sum(sizes[dt] * shape[0] for dt, shape in parts_spec(spec, model_spec).values())


def _levels(bits: int) -> int:
    return (1 << bits) - 1


def _pack(q: torch.Tensor, bits: int) -> torch.Tensor:
    per = 8 // bits
    pad = (-q.numel()) % per
    q = torch.cat([q.to(torch.uint8), torch.zeros(pad, dtype=torch.uint8)]).reshape(-1, per)
    out = torch.zeros(q.shape[0], dtype=torch.uint8)
    for j in range(per):
        out |= q[:, j] << (bits * j)
    return out


def _unpack(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    per = 8 // bits
    cols = [(packed >> (bits * j)) & _levels(bits) for j in range(per)]
    flat = torch.stack(cols, dim=1).reshape(-1)
    if bool(flat[count:].any()):
        raise ValueError("the value part carries more values than the declared k")
    return flat[:count]


def _dequant(q: torch.Tensor, scale: torch.Tensor, bits: int) -> torch.Tensor:
    """(2q/(2^b-1) - 1) * s in float32, each operation rounded once."""
    step = torch.tensor(2.0 / _levels(bits), dtype=torch.float32)
    t = torch.mul(q.to(torch.float32), step)
    t.sub_(1.0)
    return t.mul_(scale)


def _topk_chunks(flat: torch.Tensor, chunk: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(offsets sorted within each chunk, values) of the k largest magnitudes of each full chunk."""
    rows = flat.reshape(-1, chunk)
    idx = torch.topk(rows.abs(), k, dim=1, sorted=False).indices.sort(dim=1).values
    return idx, torch.gather(rows, 1, idx)


def compress(delta: dict[str, torch.Tensor], spec: CompressSpec) -> dict[str, torch.Tensor]:
    """Chunked top-k of every tensor, values quantized per chunk; see the module docstring."""
    idx_parts, q_parts, scale_parts = [], [], []
    for name in sorted(delta):
        flat = delta[name].detach().to(torch.float32).reshape(-1)
        full = flat.numel() // spec.chunk * spec.chunk
        pieces = []
        if full:
            pieces.append(_topk_chunks(flat[:full], spec.chunk, spec.k))
        if flat.numel() > full:
            tail = flat[full:]
            pieces.append(_topk_chunks(tail, tail.numel(), min(spec.k, tail.numel())))
        for idx, vals in pieces:
            s = vals.abs().amax(dim=1).to(torch.bfloat16)
            sf = s.to(torch.float32).unsqueeze(1)
            ratio = torch.where(sf > 0, vals / torch.where(sf > 0, sf, 1.0), 0.0)
            q = torch.round((ratio + 1) * (_levels(spec.bits) / 2)).clamp_(0, _levels(spec.bits))
            idx_parts.append(idx.reshape(-1))
            q_parts.append(q.reshape(-1).to(torch.uint8))
            scale_parts.append(s)
    idx = torch.cat(idx_parts) if idx_parts else torch.zeros(0, dtype=torch.int64)
    q = torch.cat(q_parts) if q_parts else torch.zeros(0, dtype=torch.uint8)
    return {"idx": idx.to(torch.uint8 if spec.chunk <= 256 else torch.int16),
            "val": _pack(q, spec.bits),
            "scale": torch.cat(scale_parts) if scale_parts else torch.zeros(0, dtype=torch.bfloat16)}


def check_parts(parts: dict[str, torch.Tensor], spec: CompressSpec, model_spec: dict) -> torch.Tensor:
    """Every offset in its chunk and strictly increasing, every scale finite and >= 0.

    Returns the unpacked levels. ValueError names the first problem. Nothing here
    allocates more than the parts themselves (a few times the kept count).
    """
    want = parts_spec(spec, model_spec)
    names = {"U8": torch.uint8, "I16": torch.int16, "BF16": torch.bfloat16}
    for key, (dtype, shape) in want.items():
        t = parts.get(key)
        if t is None or t.dtype != names[dtype] or tuple(t.shape) != shape:
            raise ValueError(f"part {key!r} is not {dtype}{list(shape)}, as the declared chunk/k/bits require")
    if set(parts) != set(want):
        raise ValueError(f"unexpected parts {sorted(set(parts) - set(want))[:5]}")
    scale = parts["scale"].to(torch.float32)
    if not bool(torch.isfinite(scale).all()) or bool((scale < 0).any()):
        raise ValueError("a chunk's scale is negative, NaN or infinite")
    idx = parts["idx"].to(torch.int32)
    pos = 0
    for name, numel, _chunks, kept in _layout(spec, model_spec):
        full = numel // spec.chunk
        body = idx[pos:pos + full * spec.k].reshape(full, spec.k)
        tail = idx[pos + full * spec.k:pos + kept]
        tail_len = numel - full * spec.chunk
        for rows, limit in ((body, spec.chunk), (tail.reshape(1, -1), tail_len)):
            if rows.numel() == 0:
                continue
            if bool((rows >= limit).any()) or bool((rows < 0).any()):
                raise ValueError(f"tensor {name!r}: an index is out of range (chunk of {limit})")
            steps = rows[:, 1:] - rows[:, :-1]
            if bool((steps == 0).any()):
                raise ValueError(f"tensor {name!r}: duplicate indices in a chunk")
            if bool((steps < 0).any()):
                raise ValueError(f"tensor {name!r}: indices of a chunk are not in increasing order")
        pos += kept
    return _unpack(parts["val"], spec.bits, idx.numel())


def entries(parts: dict[str, torch.Tensor], spec: CompressSpec, model_spec: dict, check: bool = True):
    """(name, numel, flat positions, float32 values) per tensor, after check_parts; nothing dense.

    ``check=False`` only for parts whose sha256 is a merged delta's (they passed check_parts then).
    """
    q = check_parts(parts, spec, model_spec) if check else _unpack(parts["val"], spec.bits, parts["idx"].numel())
    pos = chunk_pos = 0
    for name, numel, chunks, kept in _layout(spec, model_spec):
        chunk_of = torch.div(torch.arange(kept, dtype=torch.int64), spec.k, rounding_mode="floor")  # k per chunk
        where = parts["idx"][pos:pos + kept].to(torch.int64) + chunk_of * spec.chunk
        scale = parts["scale"][chunk_pos:chunk_pos + chunks].to(torch.float32)[chunk_of]
        yield name, numel, where, _dequant(q[pos:pos + kept], scale, spec.bits)
        pos, chunk_pos = pos + kept, chunk_pos + chunks


def expand(parts: dict[str, torch.Tensor], spec: CompressSpec, model_spec: dict,
           dtypes: dict[str, torch.dtype] | None = None) -> dict[str, torch.Tensor]:
    """The dense delta, after check_parts; each tensor cast to ``dtypes[name]`` (default float32)."""
    out = {}
    for name, numel, where, vals in entries(parts, spec, model_spec):
        flat = torch.zeros(numel, dtype=torch.float32)
        flat[where] = vals
        out[name] = flat.reshape(model_spec[name][1]).to((dtypes or {}).get(name, torch.float32))
    return out


def apply_sparse_(cur: torch.Tensor, where: torch.Tensor, vals: torch.Tensor, scale: float,
                  stale: torch.Tensor | None) -> torch.Tensor:
    """In place, bit for bit the attenuated merge ``(delta.f32 * scale + cur.f32).to(cur.dtype)`` of a
    delta that is 0 outside ``where`` (``vals``: its float32 values there, before the cast to cur's dtype).

    Outside ``where`` that merge is ``cur + 0.0``: cur itself, except that -0.0 becomes +0.0. ``stale``
    names the only places a -0.0 can be (what the previous sparse merge returned; None: anywhere),
    which are cleared outside ``where``. Returns the places this merge wrote -0.0 (almost always none).
    ``cur`` is contiguous.
    """
    flat = cur.view(-1)
    step = torch.mul(vals.to(cur.dtype).to(torch.float32), torch.tensor(scale, dtype=torch.float32))
    step.add_(flat[where].to(torch.float32))  # from the values before any clearing
    new = step.to(cur.dtype)
    if stale is None:
        flat.add_(0.0)
    elif stale.numel():
        flat[stale] = flat[stale].add(0.0)
    flat[where] = new
    return where[(new == 0) & torch.signbit(new)]
