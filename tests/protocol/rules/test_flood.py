"""The flood rule (woolf/protocol/rules/flood.py): what a contributor over the open-PR limit is told it can do."""

from __future__ import annotations

import pytest

from tests.crafting import craft_pr, random_delta
from woolf.validator import Validator


def test_the_open_pr_limit_tells_a_keyless_name_it_cannot_withdraw(make_net):
    net = make_net(**{"queue.max_open_per_contributor": "1", "policy.min_improvement": "-10"})
    val = net.clone("val")
    from woolf.errors import ForgeError

    craft_pr(val, tensors=random_delta(val, scale=0.003, seed=0), who="mallory")
    with pytest.raises(ForgeError) as hub:  # the hub refuses the second; the message says what helps
        craft_pr(val, tensors=random_delta(val, scale=0.003, seed=1), who="mallory")
    assert "an unsigned name is anyone's" in hub.value.message and "withdraw" not in hub.value.message
    assert all(v.accepted for v in Validator(val, device="cpu").run())
