"""The centralized baseline: one worker, the same code, the same total steps and data.

Usage:
    loss = centralized_baseline(ledger, ["p1", "p2"], rounds=4, steps=60)
"""

from __future__ import annotations

from woolf.workloads.base import TrainData, load_workload


def centralized_baseline(ledger, contributors: list[str], rounds: int, steps: int,
                         device: str = "cpu") -> float:
    """Train genesis for len(contributors)*rounds*steps steps on all the participants' shards."""
    wl = load_workload(ledger.config.workload)
    genesis = ledger.load_weights(ledger.show(0))
    texts, files = [], []
    for r in range(rounds):
        for c in contributors:
            shard = wl.default_data(c, r)
            texts += shard.texts
            files += shard.files
    data = TrainData(texts, "centralized", files)
    trained, _ = wl.train(genesis, data, len(contributors) * rounds * steps, device=device, seed=0)
    return wl.evaluate(trained, ledger.benchmark(), device)["loss"]
