"""Peak memory of `audit` recomputing a merge on a 96 MB model: one model, not a model and its delta.

The audit process records its peak RSS (VmHWM) above the interpreter's after imports. With the
delta loaded whole beside the parent's weights (the merge written into the delta's memory) the
audit held 2x the model above the interpreter (benchmarks/RESULTS.md §13: 2.25x with it at 250M);
reading the delta tensor by tensor and merging into the parent's memory holds the weights and
one tensor (storage/lazy.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from tests.conftest import Network, git
from tests.crafting import craft_pr
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.validator import Validator

N_PARAMS = 24_000_000  # float32, 8 tensors of 12 MB
MODEL = N_PARAMS * 4
PROBE = r"""
import json, sys
import safetensors.torch  # noqa: F401 - imported before the baseline, as the interpreter's share
import woolf.core.merge_rules  # noqa: F401
from woolf.audit.recompute import audit
from woolf.ledger.ledger import Ledger
def rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
led = Ledger.open(sys.argv[1])
led.store._remote_odb()
base = rss()
report = audit(led)
print(json.dumps({"base": base, "peak": rss(), "ok": report.ok, "checked": report.versions_checked,
                  "problems": report.problems}))
"""


def test_audit_recomputes_a_merge_holding_one_model(tmp_path):
    work = Ledger.init(tmp_path / "work", CreateOptions(storage=str(tmp_path / "storage"), workload="synthetic",
                       overrides={"workload.params.n_params": str(N_PARAMS), "policy.min_improvement": "-1e9",
                                  "scoring.min_effect": "0"}))
    git("clone", "-q", "--bare", str(work.root), str(tmp_path / "hub.git"), cwd=tmp_path)
    net = Network(tmp_path, work, tmp_path / "hub.git")
    val, alice = net.clone("val"), net.clone("alice")
    g = torch.Generator().manual_seed(1)
    w = alice.load_weights(alice.head("refs/remotes/origin/main"))
    pr = craft_pr(alice, tensors={k: torch.randn(v.shape, generator=g) * 1e-3 for k, v in w.items()}, who="alice")
    del w
    [v] = Validator(val, device="cpu").run()
    assert v.id == pr and v.accepted, v.reason
    carol = net.clone("carol")
    proc = subprocess.run([sys.executable, "-c", PROBE, str(carol.root)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["ok"] and out["checked"] == 2, out["problems"]
    above = (out["peak"] - out["base"]) / MODEL
    print(f"\naudit: interpreter {out['base'] / 2**20:.0f} MiB, peak above it {above:.2f}x the model")
    # version 0 read (1x), version 1 recomputed into its memory, one delta tensor (1/8) beside it
    assert above < 1.6
