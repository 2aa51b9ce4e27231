"""A PR's recipe: its rules, each a one-line "recipe:" refusal, what cannot be audited, and the audit draw."""

from __future__ import annotations

import math

import pytest

from woolf.protocol.recipe import (
    FRESH,
    PRIVATE,
    RecipeLimits,
    check_recipe,
    draw_material,
    make_recipe,
    relative_distance,
    retrain_draw,
    shard_data,
    unverifiable,
)

pytestmark = pytest.mark.unit

LIMITS = RecipeLimits(max_steps=100, max_batch=64)
KNOWN = {"lr", "batch_size", "d_model"}


def _recipe(**kw) -> dict:
    args = dict(base_version=3, base_commit="c" * 40, data=shard_data("alice", 3), seed=7, steps=20,
                workload="charlm", params={"d_model": 32}, batch=8, lr=3e-3, global_step=60, optimizer=FRESH,
                device="cpu", libraries={"torch": "2.13.0"}, seconds=1.5)
    args.update(kw)
    return make_recipe(**args)


def _check(r, **kw):
    return check_recipe(r, **{"contributor": "alice", "base_version": 3, "limits": LIMITS, "known_params": KNOWN, **kw})


def test_an_honest_recipe_passes():
    assert _check(_recipe()) is None
    assert _check(_recipe(data=dict(PRIVATE))) is None
    assert unverifiable({**_recipe(), "proof": {}}) is None  # (the proof's own rules: protocol/proof.py)


@pytest.mark.parametrize("recipe, expected", [
    (_recipe(data=shard_data("bob", 3)), "recipe: shard bob@v3 was not assigned to alice"),
    (_recipe(data=shard_data("alice", 2)), "recipe: shard alice@v2 was not assigned to alice"),
    (_recipe(base_version=2), "recipe: its base version 2 is not the PR's parent, version 3"),
    (_recipe(steps=101), "recipe: 101 steps, over the ledger's workload.max_steps 100"),
    (_recipe(batch=65), "recipe: batch 65, over the ledger's limits.max_batch 64"),
    (_recipe(params={"d_model": 32, "sneaky": 1}), "recipe: unknown workload parameter(s) 'sneaky'"),
    (_recipe(steps=0), "recipe: malformed (steps must be at least 1)"),
    (_recipe(optimizer={"start": "restarted"}), "recipe: malformed (optimizer must be"),
    ({**_recipe(), "nproc": 0}, "recipe: malformed (nproc must be"),
    ({**_recipe(), "lora": ["r=4"]}, "recipe: malformed (lora must be"),
    ({"schema": 99}, "recipe: malformed (schema must be 1)"),
    ("not a table", "recipe: malformed"),
])
def test_each_bad_recipe_is_one_line_refusal(recipe, expected):
    reason = _check(recipe)
    assert reason is not None and reason.startswith(expected) and "\n" not in reason


def test_a_taken_tasks_shard_and_a_followed_base_are_assigned():
    r = _recipe(data=shard_data("bob", 2, task="t1"))
    assert _check(r).startswith("recipe: shard bob@v2")
    assert _check(r, taken=("bob", 2)) is None  # the task records show alice took bob's expired shard
    assert _check(_recipe(data=shard_data("alice", 2), follow=2)) is None  # followed main from v2 to v3
    assert _check(_recipe(params={"anything": 1}), known_params=None) is None  # a workload taking **kwargs


def test_what_cannot_be_audited_says_why():
    proven = {**_recipe(), "proof": {}}
    assert "private data" in unverifiable({**proven, "data": dict(PRIVATE)})
    assert unverifiable(None) == "no recipe declared"
    assert unverifiable(_recipe()).startswith("no proof of training")
    assert "error feedback" in unverifiable({**proven, "transform": "error feedback"})
    assert unverifiable({**proven, "follow": 2}) is None  # a followed run proves its follow points


def test_the_draw_is_uniform_deterministic_and_needs_the_salt():
    xs = [retrain_draw(f"{i:040x}", "pr", b"salt") for i in range(4000)]
    assert all(0 <= x < 1 for x in xs)
    assert abs(sum(x < 0.25 for x in xs) / len(xs) - 0.25) < 0.03  # a share of about the rate is drawn
    assert retrain_draw("r", "pr", b"salt") == retrain_draw("r", "pr", b"salt")
    assert retrain_draw("r", "pr", b"salt") != retrain_draw("r", "pr", b"other salt")
    assert retrain_draw("r", "pr", b"salt") != retrain_draw("r2", "pr", b"salt")  # the hub's receipt counts
    assert draw_material("r", "pr", b"salt") != draw_material("r", "pr", b"other salt")


def test_relative_distance():
    assert relative_distance(0.0, 4.0) == 0.0
    assert relative_distance(1.0, 4.0) == pytest.approx(0.5)
    assert math.isinf(relative_distance(1.0, 0.0))


@pytest.mark.parametrize("recipe, expected", [
    (_recipe(batch=None, params={"d_model": 32, "batch_size": 4096}),
     "recipe: params.batch_size 4096, over the ledger's limits.max_batch 64"),
    (_recipe(batch=32, params={"batch_size": 32, "grad_accum": 4}),
     "recipe: params.batch_size 32 x params.grad_accum 4, over the ledger's limits.max_batch 64"),
    (_recipe(batch=None, params={"batch_size": 2.5}), "recipe: params.batch_size must be an integer >= 1"),
    (_recipe(batch=None, params={"batch_size": True}), "recipe: params.batch_size must be an integer >= 1"),
    (_recipe(workload="command"), "recipe: workload 'command' is not the ledger's 'charlm'"),
])
def test_a_recipes_parameters_never_override_the_ledgers_limits_or_workload(recipe, expected):
    """A recipe's params.batch_size over limits.max_batch (with batch null) was re-trained, and
    its workload name was never compared with the ledger's."""
    reason = _check(recipe, workload="charlm")
    assert reason == expected or reason.startswith(expected), reason
    assert _check(_recipe(params={"batch_size": 8, "grad_accum": 8}, batch=8), workload="charlm", known_params=None) is None
