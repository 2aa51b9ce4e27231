"""Cheats who read the proof's code (woolf/demo/forgery.py): a chain real up to part of its steps and made up
after, a skip hidden in one middle segment, the work on other data. Each seals a chain its own states
digest to, serves those states when challenged, and is caught where an audited segment does not replay."""

from __future__ import annotations

import pytest

from woolf.demo.forgery import forge_run
from woolf.participant import SubmitOptions, submit
from woolf.participant.prove import prove_once
from woolf.validator import Validator

AUDIT = {"validators.retrain_rate": "1", "policy.min_improvement": "-10"}


def _caught(net, name: str, **how):
    cheat, val = net.clone(name), net.clone("val")
    cheat.fetch()
    base = cheat.head("refs/remotes/origin/main")
    forge_run(cheat, cheat.workload(), name, base, 20, 5, **how)
    submit(cheat, SubmitOptions(contributor=name))
    assert Validator(val, device="cpu", name="v1").run() == []  # challenged, like anyone
    assert prove_once(cheat)  # it answers: its states digest to its links
    [v] = Validator(val, device="cpu", name="v1").run()
    return v


@pytest.mark.parametrize("share", [0.5, 0.9])
def test_a_lazy_chain_made_up_after_its_real_steps_is_caught_where_it_is_made_up(make_net, share):
    """The final segment (9: steps 19-20) is audited on every drawn PR and is made up whatever the share; the
    other drawn segment is caught first when it lies in the made-up part too (steps after 20 x share)."""
    v = _caught(make_net(**AUDIT), "lazy", trained=share)
    assert v.state == "rejected" and "retrain-failed" in v.flags and 9 in v.retrain["segments"]
    seg = v.retrain["segment"]
    assert 2 * seg + 1 > 20 * share, v.reason  # a made-up segment, named at its first step
    assert v.reason.startswith(f"retrain: step {2 * seg + 1} of 20 does not replay (segment {seg}, steps "
                               f"{2 * seg + 1}-{2 * seg + 2})"), v.reason


def test_a_skip_hidden_in_a_middle_segment_is_caught_when_that_segment_is_audited(make_net):
    v = _caught(make_net(**AUDIT, **{"proof.segments": "126"}), "lazy", trained=0.9, hide=True)
    assert v.state == "rejected" and v.retrain["retrain"] == "mismatch" and v.retrain["segment"] < 9


def test_a_free_riders_work_on_other_data_does_not_replay_on_its_shard(make_net):
    net = make_net(**AUDIT)
    name = "free-rider"
    other = net.work.workload().default_data("someone-else", 0)
    v = _caught(net, name, data=other)
    assert v.state == "rejected" and v.reason.startswith("retrain: step "), v.reason
    assert "retrain-failed" in v.flags
