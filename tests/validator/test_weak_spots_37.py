"""Issue 37's weak spots that this branch closes: a hidden benchmark's numbers in a rejection's reason
to 0.01 (like its metrics), and lockout messages that tell a keyless contributor what it can do."""

from __future__ import annotations

import pytest

from tests.crafting import craft_pr, random_delta
from woolf.ledger.benchmark import published_reason
from woolf.protocol.config import LedgerConfig
from woolf.validator import Validator


@pytest.mark.unit
def test_a_rejection_on_a_hidden_benchmark_prints_its_numbers_to_two_decimals():
    cfg = LedgerConfig(name="x")
    reason = "loss 5.6974 -> 5.7387: improvement -0.0413 is below the required -0.0200"
    assert published_reason(cfg, reason) == reason  # the public benchmark: nothing to hide
    cfg.benchmark.hidden_sha256 = "ab" * 32
    assert published_reason(cfg, reason) == "loss 5.70 -> 5.74: improvement -0.04 is below the required -0.02"
    assert published_reason(cfg, "version 12 (PR x-1)") == "version 12 (PR x-1)"


def test_the_open_pr_limit_tells_a_keyless_name_it_cannot_withdraw(make_net):
    net = make_net(**{"queue.max_open_per_contributor": "1", "policy.min_improvement": "-10"})
    val = net.clone("val")
    from woolf.errors import ForgeError

    craft_pr(val, tensors=random_delta(val, scale=0.003, seed=0), who="mallory")
    with pytest.raises(ForgeError) as hub:  # the hub refuses the second; the message says what helps
        craft_pr(val, tensors=random_delta(val, scale=0.003, seed=1), who="mallory")
    assert "an unsigned name is anyone's" in hub.value.message and "withdraw" not in hub.value.message
    assert all(v.accepted for v in Validator(val, device="cpu").run())


@pytest.mark.parametrize("dangling", [False, True])
def test_export_into_a_symlinked_target_is_a_usage_error(make_net, tmp_path, dangling):
    from woolf.errors import UsageError
    from woolf.ledger.export import export_version

    net = make_net()
    target = tmp_path / "real"
    if not dangling:
        target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):  # main: NotADirectoryError from rmdir/rename
        export_version(net.work, 0, link)
    assert link.is_symlink() and (dangling or not any(target.iterdir()))
