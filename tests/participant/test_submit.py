"""`woolf submit` of a float32 model holds a few tensors, never a model: traced peak < 0.5x the model.

numpy reports its allocations to tracemalloc, so the traced peak is the arrays submit made (the
old path loaded the base and the trained weights whole: 2x the model).
"""

from __future__ import annotations

import tracemalloc

from tests.conftest import Network, git
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.participant import SubmitOptions, TrainOptions, submit, train

N_PARAMS = 4_000_000  # 16 MB, in 8 tensors of 2 MB


def test_submit_streams_the_delta(tmp_path):
    work = Ledger.init(tmp_path / "work", CreateOptions(storage=str(tmp_path / "storage"), workload="synthetic",
                       overrides={"workload.params.n_params": str(N_PARAMS), "policy.min_improvement": "-1e9"}))
    git("clone", "-q", "--bare", str(work.root), str(tmp_path / "hub.git"), cwd=tmp_path)
    net = Network(tmp_path, work, tmp_path / "hub.git")
    alice = net.clone("alice")
    train(alice, TrainOptions(steps=1, contributor="alice", device="cpu"))
    alice.weights_path(alice.head())  # verified in this clone's cache, as train leaves it
    tracemalloc.start()
    try:
        result = submit(alice, SubmitOptions(contributor="alice"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["delta_size"] > N_PARAMS * 4
    assert peak < 0.5 * N_PARAMS * 4, f"submit traced {peak / 2**20:.1f} MiB for a {N_PARAMS * 4 / 2**20:.0f} MiB model"
