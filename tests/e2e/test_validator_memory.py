"""Peak memory of a validator working through hostile PRs and honest ones, on a 32 MB model.

The hostile PRs come first in the queue (received first); after each verdict the
validator process records its peak RSS (VmHWM), so one run gives the peak while
only hostile PRs were handled and the peak after the honest ones. Measured on
2 shared cores (2026-11-30), with the delta loaded whole: interpreter 227-245 MiB; hostile PRs
2.07-2.29x the model above it (3.29x once, in a loaded full-suite run), honest ones 4.35-6.34x.
With the delta read tensor by tensor and the merge in place (2026-12-02): see the asserts.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import torch

from tests.conftest import Network, git
from tests.crafting import craft_pr, next_second
from tests.hostile_corpus import _sparse, header_file, storage_object
from woolf.forges.local import LocalForge
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger

N_PARAMS = 24_000_000  # float32: 96 MB of weights (smaller, torch's code pages faulted in on first use dominate)
MODEL = N_PARAMS * 4
HOSTILE_BOUND = 1.8  # x the model above the interpreter (the measurements are in the asserts' comments)
HONEST_BOUND = 1.9
PROBE = r"""
import json, sys
import safetensors.torch  # noqa: F401 - imported before the baseline, as the interpreter's share
from woolf.ledger.ledger import Ledger
from woolf.validator import Validator
def rss():  # VmHWM: this process's peak RSS (ru_maxrss would include the parent's, kept across fork+exec)
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
led = Ledger.open(sys.argv[1])
v = Validator(led, device="cpu")
v.forge.list(); led.store._remote_odb(); led.benchmark()
base, marks = rss(), []
mark = lambda x: marks.append([x.id, x.accepted, x.reason, rss()])  # noqa: E731
v.run(ids=json.loads(sys.argv[2]), on_verdict=mark)  # the hostile PRs: rejections land at the pass's end
v.run(on_verdict=mark)
print(json.dumps({"base": base, "marks": marks}))
"""


def _delta(led, scale, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = led.load_weights(led.head("refs/remotes/origin/main"))
    return {k: torch.randn(v.shape, generator=g) * scale for k, v in w.items()}


def test_peak_memory_hostile_then_honest(tmp_path):
    work = Ledger.init(tmp_path / "work", CreateOptions(storage=str(tmp_path / "storage"), workload="synthetic",
                       overrides={"workload.params.n_params": str(N_PARAMS), "policy.min_improvement": "-1e9",
                                                  "queue.fair": "false", "scoring.min_effect": "0"}))  # hostile first, as received;
    # the honest deltas here are noise that moves the loss by ~1e-6: not the subject, so no floor
    git("clone", "-q", "--bare", str(work.root), str(tmp_path / "hub.git"), cwd=tmp_path)
    net = Network(tmp_path, work, tmp_path / "hub.git")
    val, mallory, alice = net.clone("val"), net.clone("mallory"), net.clone("alice")
    d = _delta(mallory, 1e-3)
    hostile = [
        craft_pr(mallory, tensors={k: v * float("nan") for k, v in d.items()}),  # loaded in full, then refused
        craft_pr(mallory, tensors={k: v * 1e9 for k, v in d.items()}),  # loaded with the model: the norm check
        craft_pr(mallory, tensors={k: v.double() for k, v in d.items()}),  # 64 MB file of another dtype
        craft_pr(mallory, raw=header_file(None, raw_header=b"[" * 200_000 + b"]" * 200_000)),
    ]
    sparse = craft_pr(mallory, raw=secrets.token_bytes(1000))
    obj = storage_object(net, json.loads(mallory.git.show_bytes(
        f"refs/woolf/pr/{sparse}/head:submissions/{sparse}/submission.json"))["delta"]["md5"])
    obj.chmod(0o644)
    obj.unlink()
    _sparse(obj)  # 2 GiB behind a pointer that declares 1,000 bytes
    hostile.append(sparse)
    LocalForge.for_ledger(val).list()  # the validator receives the hostile PRs first
    next_second()
    honest = [craft_pr(alice, tensors=_delta(alice, 1e-3, seed=s), who=w) for s, w in ((1, "alice"), (2, "bob"))]
    del d
    proc = subprocess.run([sys.executable, "-c", PROBE, str(val.root), json.dumps(hostile)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1",
                               # big buffers straight from mmap and back at free: RSS shows live memory,
                               # not what glibc's heap happens to keep after a 4 MB tensor is freed
                               "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    marks = out["marks"]
    ids = [m[0] for m in marks]
    assert sorted(ids[:len(hostile)]) == sorted(hostile) and sorted(ids[len(hostile):]) == sorted(honest), marks
    assert not any(m[1] for m in marks[:len(hostile)]) and all(m[1] for m in marks[len(hostile):]), marks
    hostile_peak = (marks[len(hostile) - 1][3] - out["base"]) / MODEL
    honest_peak = (marks[-1][3] - out["base"]) / MODEL
    print(f"\nmodel {MODEL / 2**20:.0f} MiB, interpreter {out['base'] / 2**20:.0f} MiB; "
          f"peak above the interpreter: hostile PRs {hostile_peak:.2f}x the model, after honest PRs "
          f"{honest_peak:.2f}x")
    # the norm check holds the current weights and one tensor of the delta at a time (storage/lazy.py);
    # when the delta was loaded whole this measured 2.07-2.24x alone (once 3.29x in a loaded full-suite
    # run); reading the 2 GiB object past its declared size, or the delta held whole, fails it
    assert hostile_peak < HOSTILE_BOUND
    # one model: the delta is read tensor by tensor, scoring's base + delta goes into main's memory, main's
    # metrics are measured before the merge, which writes the candidate into main's memory one tensor at
    # a time; the synthetic benchmark holds one tensor, the candidate is saved from its own memory.
    # With the delta, the candidate and main whole this measured 4.35-6.34x
    assert honest_peak < HONEST_BOUND
