"""How much do concurrent contributions overlap? Cosine between participants' deltas from one base.

Usage:
    python benchmarks/delta_overlap.py            # the demo's charlm, 3 participants x 30 steps

Three participants train 30 steps each (their own default shards, the demo's
optimizer) from the same version: at genesis, and after 120 steps of training.
Prints the pairwise cosine of their deltas and the norm of their mean relative
to one delta. A mean almost as long as each delta means the three did nearly
the same work: averaging them (what attenuated merges at staleness 0..2 amount
to) moves the model about as far as one participant would have alone.
"""

from __future__ import annotations

import torch

from woolf.workloads.charlm import CharLM


def overlap(wl: CharLM, base: dict, seed: int, n: int = 3, steps: int = 30) -> tuple[list[float], float]:
    ds = []
    for w in range(n):
        out, _ = wl.train(base, wl.default_data(f"w{w}", 0), steps, seed=seed + w)
        ds.append(torch.cat([(out[k] - base[k]).flatten().float() for k in base]))
    cos = [torch.nn.functional.cosine_similarity(ds[i], ds[j], dim=0).item()
           for i in range(n) for j in range(i + 1, n)]
    mean = sum(ds) / n
    return cos, (mean.norm() / torch.stack([d.norm() for d in ds]).mean()).item()


def main() -> None:
    wl = CharLM()
    genesis = wl.genesis(0)
    trained, _ = wl.train(genesis, wl.default_data("w0", 0), 120, seed=99)
    for label, base, seed in (("genesis", genesis, 7), ("after 120 steps", trained, 17)):
        cos, ratio = overlap(wl, base, seed)
        print(f"{label:16} pairwise cosine {', '.join(f'{c:.3f}' for c in cos)}; |mean| / |delta| {ratio:.3f}")


if __name__ == "__main__":
    main()
