"""Training that follows the ledger: local progress moved onto newer versions mid-training."""

from __future__ import annotations

import pytest
import torch

from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.participant.follow import Follower
from woolf.validator import Validator
from woolf.workloads.charlm import CharLM


def test_follower_returns_exactly_what_main_moved(network):
    alice, bob, val = network.clone("alice"), network.clone("bob"), network.clone("val")
    head = alice.pull()
    base = alice.load_weights(head)
    follow = Follower(alice, head, base)
    assert follow() is None  # nothing newer yet
    network.train_submit(bob, "bob")
    Validator(val, device="cpu").run()
    shift = follow()
    v1 = alice.load_weights(alice.show(1, ref="refs/remotes/origin/main"))
    assert follow.base.version == 1 and follow.rebases == 1
    assert all(torch.equal(base[k] + shift[k], v1[k]) for k in base)
    assert follow() is None  # already there


@pytest.mark.unit
def test_charlm_adds_the_shift_to_its_local_weights():
    wl = CharLM(d_model=16, n_layer=1, context=16, batch_size=2, lr=0.0)  # lr 0: only the shift moves them
    w0 = wl.genesis()
    shift = {k: torch.full_like(v, 0.25) for k, v in w0.items()}
    calls = []

    def follow():
        calls.append(1)
        return shift if len(calls) == 1 else None

    out, _ = wl.train(w0, wl.default_data("a", 0), 6, follow=follow, follow_every=2)
    assert len(calls) == 2  # after steps 2 and 4, not after the last step
    assert all(torch.allclose(out[k], w0[k] + 0.25) for k in w0)


def test_train_follows_a_merge_that_lands_mid_training_and_submits_against_it(make_net):
    net = make_net(**{"workload.follow_every": "2", "policy.min_improvement": "-10"})
    alice, bob, val = net.clone("alice"), net.clone("bob"), net.clone("val")
    net.train_submit(bob, "bob")
    merged = []

    def progress(step, total, loss):  # bob's PR is merged while alice trains
        if step == 1 and not merged:
            merged.extend(Validator(val, device="cpu").run())

    result = train(alice, TrainOptions(steps=6, contributor="alice", progress=progress))
    assert merged and merged[0].accepted
    assert result["base_version"] == 1 and result["training"]["followed"] == 1
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert pr["base_version"] == 1
    [v] = Validator(val, device="cpu").run()
    assert v.accepted and v.staleness == 0 and v.attenuation == 1.0


def test_follower_ignores_a_version_that_is_not_the_model_being_trained(network):
    """A newer version whose tensors have other shapes (another model on main) is not followed:
    no crash mid-training, no shift, the base stays."""
    alice, bob, val = network.clone("alice"), network.clone("bob"), network.clone("val")
    head = alice.pull()
    other = {k: torch.zeros(v.numel() + 1) for k, v in alice.load_weights(head).items()}
    follow = Follower(alice, head, other)
    network.train_submit(bob, "bob")
    Validator(val, device="cpu").run()
    assert follow() is None and follow.base.version == 0 and follow.rebases == 0
