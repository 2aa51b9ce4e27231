"""The norm guard's bound by standing (woolf/validator/standing.py), one no attacker sets: two keyless Sybils
that merge noise no longer lock it; keyed contributors' merged norms (and a floor from the model's own norm)
set the reference; keyless names may only raise it."""

from __future__ import annotations

import pytest

from tests.crafting import craft_pr, random_delta
from woolf.ledger.verdicts import merged_records
from woolf.validator import Validator


def _validate(val) -> dict:
    return {v.id: v for v in Validator(val, device="cpu").run()}


def test_two_keyless_noise_merges_never_lock_out_honest_deltas(make_net):
    net = make_net()  # the defaults: norm guard 10x, gate -0.02
    val, alice, dave = net.clone("val"), net.clone("alice"), net.clone("dave")
    first = net.train_submit(alice, "alice")["id"]  # signed by her listed key: she has standing
    assert _validate(val)[first].accepted
    sybils = [craft_pr(val, tensors=random_delta(val, scale=3e-4, seed=i), who=f"sybil{i}") for i in range(2)]
    got = _validate(val)
    assert all(got[s].accepted for s in sybils), [got[s].reason for s in sybils]
    norms = {r.contributor: r.delta_norm for r in merged_records(val)}
    assert norms["sybil0"] < norms["alice"] / 50  # the noise is tiny next to honest work
    dave.pull()
    honest = net.train_submit(dave, "dave")["id"]  # keyless, honest: a delta like alice's
    v = _validate(val)[honest]
    assert "median norm" not in v.reason, v.reason  # main: "over 10x the median norm ... (0.0523)"
    assert v.accepted, v.reason


@pytest.mark.unit
def test_norm_bound_is_raised_by_standing_and_the_floor_never_lowered():
    from woolf.core.bounds import FLOOR_RATIO, best_of, norm_bound

    # everyone's median says 0.5; a keyed contributor's 5.8 and the model's norm 100 raise it
    b = norm_bound(0.5, [5.8], 100.0, 10.0)
    assert b.source == "standing" and abs(b.limit - 58.0) < 1e-9
    b = norm_bound(0.5, [], 100.0, 10.0)
    assert b.source == "floor" and abs(b.limit - 10.0 * FLOOR_RATIO * 100.0) < 1e-9
    assert "floor" in b.note
    b = norm_bound(500.0, [5.8], 100.0, 10.0)  # keyless merges may raise it (they pass the gate to merge)
    assert b.source == "median" and b.limit == 500.0 and b.note == ""
    assert norm_bound(0.5, [5.8], 100.0, 0.0) is None  # the guard is off
    assert norm_bound(None, [float("nan")], float("nan"), 10.0) is None
    assert norm_bound(None, [5.8], 100.0, 10.0) is None  # no reference yet: nothing sets one
    assert best_of([4.25, float("nan"), 4.21, 4.3]) == 4.21 and best_of([1, 3], "maximize") == 3
    assert best_of([]) is None


