"""Count sketches of deltas: a few numbers per tensor from which cosines between deltas are estimated,
so that a delta can be compared with thousands of earlier ones without reading them again.

Usage:
    a = sketch(delta_a, seed)            # {tensor name: float32 tensor of WIDTH numbers}
    b = sketch(delta_b, seed)            # the same secret seed for every delta of one index
    est = estimate(a, b, 0.97)           # core.scores.Similarity, approximately
    cos, share = estimate_many(matrix(a), torch.stack([matrix(b), ...]), 0.97)   # one against N at once
    maybe = may_copy_many(matrix(a), norms2_a, torch.stack([...]), 0.97)        # a copy not ruled out

A tensor is read as rows of WIDTH elements (the last padded with zeros); each row gets a random sign and a
random cyclic shift, both drawn from the seed and the tensor's name: element c of row r goes to bucket
(c + shift_r) mod WIDTH with sign_r. Two elements of different rows share a bucket with probability 1/WIDTH
and their signs are independent, so a sketch is a linear map whose dot products are estimated without
bias (their error is about |a||b|/sqrt(WIDTH) per tensor), as a count sketch with one draw per element,
at the cost of a pass over the bytes (one draw per row: the per-element count sketch measured at
~13 s per GB on 2 cores, this one at ~0.3 s). The seed must stay secret: whoever knows the shifts and
signs can add a small change that cancels a copy's sketch. Rows are drawn in blocks of BLOCK elements,
so a tensor of any size is sketched in bounded memory.
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


def _add_block(acc: torch.Tensor, x: torch.Tensor, g: torch.Generator) -> None:
    """One block's elements into ``acc`` [shift, column]: each row of ``width`` (the last padded with zeros)
    signed and summed into the row of its shift. A sparse (width x rows) matrix, one sign per column, times
    the rows (index_add_ is ~20x slower under torch's deterministic mode); float32 within a block."""
    width = acc.shape[1]
    full = x.numel() // width
    r = torch.randint(0, 2 * width, (-(-x.numel() // width),), generator=g)
    shift, sign = r % width, (r // width * 2 - 1).to(torch.float32)
    if full:
        pick = torch.sparse_coo_tensor(torch.stack([shift[:full], torch.arange(full)]), sign[:full],
                                       (width, full), check_invariants=False)
        acc += torch.sparse.mm(pick, x[:full * width].to(torch.float32).view(full, width))
    if full < len(r):  # the last, partial row
        tail = x[full * width:].to(torch.float64) * float(sign[full])
        acc[int(shift[full]), :tail.numel()] += tail


def sketch_tensor(t: torch.Tensor, seed: bytes, name: str, width: int = WIDTH) -> torch.Tensor:
    flat = t.detach().reshape(-1)
    acc = torch.zeros(width, width, dtype=torch.float64)  # [shift, column]: summed over the rows of each shift
    for b, start in enumerate(range(0, flat.numel(), BLOCK)):
        _add_block(acc, flat[start:start + BLOCK], _generator(seed, name, b))
    col, sh = torch.arange(width).unsqueeze(0), torch.arange(width).unsqueeze(1)
    out = torch.zeros(width, dtype=torch.float64)
    out.index_add_(0, ((col + sh) % width).reshape(-1), acc.reshape(-1))  # column c of shift s: bucket c + s
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


SPREAD = 2.25  # how far a difference's sketched squared norm may exceed its true one (see may_copy_many)


def may_copy_many(mine: torch.Tensor, mine_norms2: torch.Tensor, others: torch.Tensor, threshold: float,
                  spread: float = SPREAD) -> torch.Tensor:
    """(N,) bool: whether each of ``others`` (N, T, W) may be a copy of ``mine`` (T, W), whose tensors' exact
    squared norms are ``mine_norms2`` (T,): a whole |cosine|, or tensors carrying half its squared norm
    each at a |cosine|, that the sketches cannot put under ``threshold``.

    The sine is estimated rather than the cosine: mine is ``alpha * other + e`` (e orthogonal to
    other), and the residual of mine's sketch after its projection on other's is e's sketch, whatever
    the two deltas' own norms do in the sketch; divided by mine's exact squared norm it estimates
    1 - cosine^2, off only by how e's squared norm fares in the sketch: 1 +- sqrt(2/WIDTH) for a dense e
    (0.18), exactly twice for two equal spikes that share a bucket. A pair is kept when that estimate
    is within ``spread`` times 1 - threshold^2 (7 standard errors, and two colliding spikes): at a
    threshold of 0.97, an estimated |cosine| from about 0.93 up."""
    a, b = mine.to(torch.float64), others.to(torch.float64)
    n2 = mine_norms2.to(torch.float64)
    dots = torch.einsum("tw,ntw->nt", a, b)
    aa, bb = (a * a).sum(-1), (b * b).sum(-1)  # (T,), (N, T)
    limit = (1.0 - threshold * threshold) * spread
    total = n2.sum()
    if total <= 0:
        return torch.zeros(b.shape[0], dtype=torch.bool)
    whole = dots.sum(-1) ** 2 / (aa.sum() * bb.sum(-1)).clamp_min(1e-300)
    sin2 = (1.0 - whole) * aa.sum() / total
    per = dots ** 2 / (aa * bb).clamp_min(1e-300)
    sin2_t = (1.0 - per) * aa / n2.clamp_min(1e-300)
    copied = ((sin2_t <= limit) & (n2 > 0) & (bb > 0)) * n2
    return (sin2 <= limit) & (bb.sum(-1) > 0) | (copied.sum(-1) / total >= 0.5)
