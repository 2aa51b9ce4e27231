"""Count sketches of deltas: a few numbers per tensor from which cosines between deltas are estimated,
so that a delta can be compared with thousands of earlier ones without reading them again.

Usage:
    a = sketch(delta_a, seed)            # {tensor name: float32 tensor of WIDTH numbers}
    b = sketch(delta_b, seed)            # the same secret seed for every delta of one index
    est = estimate(a, b, 0.97)           # core.scores.Similarity, approximately
    cos, share = estimate_many(matrix(a), torch.stack([matrix(b), ...]), 0.97)   # one against N at once

Each element of a tensor goes to one of WIDTH buckets with a random sign, both drawn from the seed
and the tensor's name; a sketch is a linear map, so dot products are estimated without bias (their
error is about |a||b|/sqrt(WIDTH) per tensor). The seed must stay secret: whoever knows the buckets
can add a small change that cancels a copy's sketch. Elements are drawn in blocks of BLOCK, so a
tensor of any size is sketched in bounded memory.
"""

from __future__ import annotations

import hashlib

import torch

from woolf.core.scores import Similarity, similarity

WIDTH = 64  # buckets per tensor
BLOCK = 1 << 20  # elements hashed at once


def _generator(seed: bytes, name: str, block: int) -> torch.Generator:
    h = hashlib.sha256(seed + b"\0" + name.encode() + b"\0" + str(block).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))


def sketch_tensor(t: torch.Tensor, seed: bytes, name: str, width: int = WIDTH) -> torch.Tensor:
    flat = t.detach().reshape(-1)
    out = torch.zeros(width, dtype=torch.float64)
    for b, start in enumerate(range(0, flat.numel(), BLOCK)):
        x = flat[start:start + BLOCK].to(torch.float64)
        g = _generator(seed, name, b)
        idx = torch.randint(0, width, (x.numel(),), generator=g)
        sign = torch.randint(0, 2, (x.numel(),), generator=g).to(torch.float64).mul_(2).sub_(1)
        out.index_add_(0, idx, x * sign)
    return out.to(torch.float32)


def sketch(delta: dict, seed: bytes, width: int = WIDTH) -> dict[str, torch.Tensor]:
    """{name: sketch} of the floating tensors of ``delta`` (a dict or storage.lazy.LazyTensors)."""
    out = {}
    for name in sorted(delta.keys()):
        t = delta[name]
        if t.is_floating_point():
            out[name] = sketch_tensor(t, seed, name, width)
    return out


def estimate(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], threshold: float) -> Similarity:
    """Similarity (cosine, copied share) estimated from two sketches made with the same seed."""
    return similarity(a, b, threshold, dtype=torch.float64)


def matrix(sk: dict[str, torch.Tensor]) -> torch.Tensor:
    """A sketch as one (tensors, WIDTH) matrix, rows in name order (``sketch`` makes them in that order)."""
    if not sk:
        return torch.zeros(0, WIDTH)
    return torch.stack([sk[k] for k in sorted(sk)])


def estimate_many(mine: torch.Tensor, others: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(cosine, copied share) of ``mine`` (T, W) against each of ``others`` (N, T, W): ``estimate`` for N
    sketches of the same tensors at once (a few milliseconds for thousands)."""
    a = mine.to(torch.float64)
    b = others.to(torch.float64)
    dots = torch.einsum("tw,ntw->nt", a, b)
    aa = (a * a).sum(-1)  # (T,)
    bb = (b * b).sum(-1)  # (N, T)
    na, nb, dot = aa.sum(), bb.sum(-1), dots.sum(-1)
    cos = torch.where((na > 0) & (nb > 0), dot / torch.sqrt(na * nb).clamp_min(1e-300), torch.zeros_like(dot))
    per = dots.abs() / torch.sqrt(aa * bb).clamp_min(1e-300)
    copied = ((per >= threshold) & (aa > 0) & (bb > 0)) * aa
    share = copied.sum(-1) / na if na > 0 else torch.zeros_like(dot)
    return cos, share
