"""A LoRA run's model-sized state (woolf/participant/lora_weights.py) on a tiny Llama shape: the bf16 base read a
tensor at a time, never the float32 masters whole. The 3B numbers are a benchmark (benchmarks/lora_memory.py).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from tests.workloads.hf.test_workload import hf_network, tiny  # noqa: E402
from woolf.participant.lora_weights import lora_base  # noqa: E402
from woolf.protocol.lora_spec import parse_lora  # noqa: E402


def _hwm_mib() -> float:
    with open("/proc/self/status") as fh:
        return int(next(x for x in fh if x.startswith("VmHWM:")).split()[1]) / 1024


def test_a_bf16_base_is_read_a_tensor_at_a_time(tmp_path):
    """A bf16 checkpoint's LoRA base on the CPU: bf16 tensors read one at a time from the version's float32 file,
    the same values as casting the masters; the process's peak grows by the bf16 model and one float32
    tensor, not by the float32 masters (4 layers x 512: 42 MB of float32)."""
    model = tiny.make_tiny_model(tmp_path / "m", arch="llama", layers=4, width=512, heads=4, dtype="bfloat16")
    net = hf_network(tmp_path / "net", model)
    alice = net.clone("alice")
    wl, head = alice.workload(), alice.head()
    masters = alice.load_weights(head)
    size = sum(4 * t.numel() for t in masters.values())
    want = {k: t.to(torch.bfloat16) for k, t in masters.items()}
    del masters
    alice.weights_path(head)  # fetched and hashed first: the read below is what is measured
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak (VmHWM) from now on
    start = _hwm_mib()
    base = lora_base(alice, wl, head, parse_lora("r=4"), "cpu")
    grown = (_hwm_mib() - start) * 2**20
    assert {t.dtype for t in base.values()} == {torch.bfloat16}
    assert all(torch.equal(base[k], want[k]) for k in want)
    assert grown < 0.8 * size, (grown, size)  # bf16 (0.5x) + one tensor; the float32 masters would be 1x more
