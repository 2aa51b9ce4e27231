"""`woolf init` raises limits.max_delta_bytes to fit a dense delta of the model (the 2 GiB default refused a 2B model's)."""

from __future__ import annotations

import pytest
import torch

from woolf.ledger.create import CreateOptions, delta_bytes_needed
from woolf.ledger.ledger import Ledger
from woolf.protocol.config import LimitsConfig

MiB = 1 << 20


@pytest.mark.unit
def test_the_limit_a_model_needs():
    two_b = {f"w{i}": torch.empty(31_250_000, device="meta") for i in range(64)}  # 2B float32, no memory
    need = delta_bytes_needed(two_b)
    assert need == 8_000_000_000 + MiB + (-(8_000_000_000 + MiB) % MiB) and need % MiB == 0
    assert need > LimitsConfig().max_delta_bytes  # the default refuses it: init must raise the limit
    assert delta_bytes_needed({"w": torch.empty(10)}) == 2 * MiB  # 40 bytes + 1 MiB of header, in MiB


def test_init_keeps_the_default_for_a_small_model_and_an_explicit_limit_as_given(tmp_path):
    small = Ledger.init(tmp_path / "a", CreateOptions(storage=str(tmp_path / "sa"), workload="synthetic",
                        overrides={"workload.params.n_params": "1000"}))
    assert small.config.limits.max_delta_bytes == LimitsConfig().max_delta_bytes
    given = Ledger.init(tmp_path / "b", CreateOptions(storage=str(tmp_path / "sb"), workload="synthetic",
                        overrides={"workload.params.n_params": "1000", "limits.max_delta_bytes": "1000"}))
    assert given.config.limits.max_delta_bytes == 1000
