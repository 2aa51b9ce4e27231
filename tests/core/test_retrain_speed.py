"""The re-training estimate (woolf.core.retrain_speed.py): per unit of work, medians over many re-trainings.

The poisoned estimate: a validator kept the speed of its LAST re-training (seconds / steps, set-up included),
so one legal 1-step recipe at the largest batch made every later honest recipe be refused for hours.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from woolf.core.retrain_speed import Clock, RetrainSpeed, work_units

pytestmark = pytest.mark.unit

WL = SimpleNamespace(batch_size=8, context=32)  # the ledger's workload: its defaults


def _recipe(steps=20, batch=None, seconds=1.0, **params):
    return {"steps": steps, "batch": batch, "params": params, "seconds": seconds}


def _clock(setup: float, steps: int, per_step: float) -> Clock:
    """A re-training's clock as its progress hook leaves it: set-up, then ``steps`` steps."""
    c = Clock()
    c.start, c.steps = 0.0, steps
    c.first = setup + per_step
    c.last = setup + steps * per_step
    return c


def test_work_is_steps_times_batch_times_context_the_recipes_own_first():
    assert work_units(_recipe(), WL) == 20 * 8 * 32
    assert work_units(_recipe(batch_size=4096), WL) == 20 * 4096 * 32  # batch null: its params' batch_size
    assert work_units(_recipe(batch=16, batch_size=4096), WL) == 20 * 16 * 32
    assert work_units(_recipe(grad_accum=4, context=128), WL) == 20 * 8 * 4 * 128
    assert work_units(_recipe(batch_size="8", context=-1), WL) == 20 * 8 * 32  # malformed: the ledger's


def test_one_slow_recipe_does_not_move_the_estimate():
    speed = RetrainSpeed()
    for i in range(6):  # honest 20-step re-trainings at batch 8: 0.5 s of set-up, 0.02 s a step
        speed.record("fp", f"c{i}", _recipe(), WL, _clock(0.5, 20, 0.02 + 0.001 * i))
    before = speed.estimate(_recipe(steps=300), WL, "fp")
    # the attack: 1 step at batch 4096, 21.7 s in all (mostly set-up and one huge step)
    speed.record("fp", "mallory", _recipe(steps=1, batch_size=4096), WL, _clock(2.0, 1, 19.7))
    assert speed.estimate(_recipe(steps=300), WL, "fp") == pytest.approx(before, rel=0.05)
    # and a slow 2-step one: its per-unit rate is one sample of seven; the median stays an honest one
    speed.record("fp", "mallory", _recipe(steps=2, batch_size=4096), WL, _clock(2.0, 2, 200.0))
    after = speed.estimate(_recipe(steps=300), WL, "fp")
    assert after == pytest.approx(before, rel=0.1)
    assert 300 * 0.015 < after < 0.5 + 300 * 0.03  # about the honest 0.5 + 300 x 0.02 s


def test_a_contributor_counts_once_and_few_samples_leave_it_to_the_declared_seconds():
    speed = RetrainSpeed()
    for _ in range(10):
        speed.record("fp", "sybil", _recipe(), WL, _clock(0.5, 20, 5.0))
    assert len(speed.samples["fp"]) == 1 and speed.estimate(_recipe(), WL, "fp") is None
    speed.record("fp", "a", _recipe(), WL, _clock(0.5, 20, 0.02))
    speed.record("fp", "b", _recipe(), WL, _clock(0.5, 20, 0.02))
    assert speed.estimate(_recipe(), WL, "fp") == pytest.approx(0.5 + 20 * 0.02, rel=0.01)  # the median


def test_the_estimate_refuses_only_what_the_recipes_own_seconds_do_not_fit_either():
    slow = RetrainSpeed()
    for i in range(3):
        slow.record("fp", f"c{i}", _recipe(), WL, _clock(1.0, 20, 10.0))  # a slow validator: ~200 s per recipe
    assert slow.over(_recipe(seconds=5.0), WL, "fp", 60.0) is None  # its own 5 s fit: re-trained
    assert slow.over(_recipe(seconds=None), WL, "fp", 60.0) == pytest.approx(201.0)
    assert slow.over(_recipe(seconds=100.0), WL, "fp", 60.0) == pytest.approx(201.0)
    fast = RetrainSpeed()
    for i in range(3):
        fast.record("fp", f"c{i}", _recipe(), WL, _clock(0.5, 20, 0.01))
    assert fast.over(_recipe(seconds=100.0), WL, "fp", 60.0) is None  # declared slower; this validator is fast
    assert RetrainSpeed().over(_recipe(seconds=100.0), WL, "fp", 60.0) == 100.0  # no samples: the declared
    assert RetrainSpeed().over(_recipe(seconds=None), WL, "fp", 60.0) is None
    one = RetrainSpeed()
    one.record("fp", "x", _recipe(steps=1), WL, _clock(3.0, 1, 1.0))
    assert one.samples["fp"][0].rate is None and one.samples["fp"][0].setup == pytest.approx(4.0)
