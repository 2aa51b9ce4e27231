"""Red-team findings on the queue and identity: one crafted PR or storage object never stops the
pass, and nobody's claim costs an honest contributor her PR or her rating.

F8 (a corrupted old version's weights), F4 (open-PR limit by impersonation), F13 (quorum PR whose
delta never serves), F11 (the fair queue and Sybil names: documented, cheap per junk PR).
"""

from __future__ import annotations

import time

import pytest

from woolf.errors import IntegrityError
from woolf.forges.local import LocalForge
from woolf.validator import Validator

from .crafting import craft_pr, random_delta


def _corrupt(net, ledger, version: int) -> None:
    """Overwrite a version's weights object in storage: same size, other bytes (storage is writable)."""
    ptr = ledger.pointer(ledger.show(version).commit)
    obj = net.root / "storage" / "files" / "md5" / ptr.md5[:2] / ptr.md5[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"\x01" * ptr.size)


def test_f8_corrupted_base_weights_reject_that_pr_and_the_pass_goes_on(network):
    alice = network.clone("alice")
    craft_pr(alice, tensors=random_delta(alice, scale=0.001, seed=1), who="alice")
    Validator(network.clone("val"), device="cpu").run()  # main is version 1
    mallory = network.clone("mallory")
    v0 = mallory.show(0)
    _corrupt(network, mallory, 0)
    bad = craft_pr(mallory, tensors=random_delta(mallory, scale=0.001, seed=2), base=v0)
    val2 = network.clone("val2")  # no copy of version 0 in its cache
    LocalForge.for_ledger(val2).list()  # mallory's PR is received first
    time.sleep(1.1)
    bob = network.clone("bob")
    good = craft_pr(bob, tensors=random_delta(bob, scale=0.001, seed=3), who="bob")
    verdicts = {v.id: v for v in Validator(val2, device="cpu").run()}
    assert not verdicts[bad].accepted and "weights of its base version 0 fail their recorded hash" \
        in verdicts[bad].reason, verdicts[bad].reason
    assert verdicts[good].accepted, verdicts[good].reason
    # the bad bytes are not kept: reading version 0 again fetches and checks again, and fails again
    with pytest.raises(IntegrityError):
        val2.load_weights(v0)
