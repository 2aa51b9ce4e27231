"""Issue 37, breach 5: an oversized dense delta is refused before download (its declared size is
over what the model's spec allows), and nothing a rejected PR brought stays in the validator's cache."""

from __future__ import annotations

import torch

from tests.crafting import craft_pr, random_delta
from woolf.forges.local import LocalForge
from woolf.validator import Validator


def _validate(val) -> dict:
    return {v.id: v for v in Validator(val, device="cpu").run()}


def test_an_oversized_dense_delta_is_refused_before_download_and_leaves_no_bytes(make_net):
    net = make_net()
    val, mal = net.clone("val"), net.clone("mal")  # mal uploads: val's cache starts without its objects
    padded = {**random_delta(mal, scale=0.001), "junk": torch.zeros(1 << 20)}  # 4 MiB over the model's size
    big = craft_pr(mal, tensors=padded, who="mallory")
    v = _validate(val)[big]
    assert not v.accepted and "refused before download" in v.reason, v.reason
    # main: the object was downloaded and hashed, then refused as "unexpected tensors ['junk']"
    cache = val.root / ".dvc" / "cache" / "files" / "md5"
    left = [p for p in cache.rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]
    assert left == [], left


def test_a_rejected_delta_leaves_the_validator_cache(make_net):
    net = make_net()
    val, mal = net.clone("val"), net.clone("mal")
    bad = craft_pr(mal, tensors=random_delta(mal, scale=0.5, seed=3), who="mallory")  # the gate refuses it
    sub = next(p for p in LocalForge.for_ledger(val).list() if p.id == bad)
    md5 = sub.submission["delta"]["md5"]
    v = _validate(val)[bad]
    assert not v.accepted and v.delta_norm is not None, v.reason  # read, then refused (norm guard or gate)
    assert not val.store.cache_path(md5).exists()  # main: the rejected delta stayed in the DVC cache for good
