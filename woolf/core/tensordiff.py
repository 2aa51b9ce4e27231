"""How far apart two sets of weights are, per tensor and in total (pure arithmetic).

Usage:
    rows, total = diff_weights(weights_a, weights_b)
    rows[0] == {"name": "head.weight", "shape": [256, 64], "l2": 0.31, "relative": 0.004,
                "cosine": 0.99999, "max_abs": 0.02}

``l2`` is ||b - a||, ``relative`` is ||b - a|| / ||a||, ``cosine`` is the cosine
between a and b, ``max_abs`` is max |b - a|; all in float64. ``total`` is the
same over all tensors together. A tensor present in only one, or whose shape
differs, is listed with ``"change": "added" | "removed" | "reshaped"`` and no
numbers.
"""

from __future__ import annotations

import math

import torch


def _stats(d2: float, a2: float, b2: float, dot: float, max_abs: float) -> dict:
    l2 = math.sqrt(d2)
    na, nb = math.sqrt(a2), math.sqrt(b2)
    return {"l2": l2, "relative": l2 / na if na > 0 else (0.0 if l2 == 0 else math.inf),
            "cosine": dot / (na * nb) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0),
            "max_abs": max_abs}


def tensor_parts(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float, float, float]:
    """(||b-a||², ||a||², ||b||², <a,b>, max|b-a|) in float64."""
    x, y = a.to(torch.float64).flatten(), b.to(torch.float64).flatten()
    d = y - x
    return (float(d @ d), float(x @ x), float(y @ y), float(x @ y),
            float(d.abs().max()) if d.numel() else 0.0)


def diff_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[list[dict], dict]:
    rows: list[dict] = []
    total = [0.0, 0.0, 0.0, 0.0, 0.0]
    for name in sorted(set(a) | set(b)):
        if name not in b or name not in a:
            t = a.get(name, b.get(name))
            rows.append({"name": name, "shape": list(t.shape), "change": "removed" if name not in b else "added"})
            continue
        if a[name].shape != b[name].shape:
            rows.append({"name": name, "shape": list(b[name].shape), "from_shape": list(a[name].shape),
                         "change": "reshaped"})
            continue
        parts = tensor_parts(a[name], b[name])
        for i in range(4):
            total[i] += parts[i]
        total[4] = max(total[4], parts[4])
        rows.append({"name": name, "shape": list(a[name].shape), **_stats(*parts)})
    return rows, _stats(*total)
