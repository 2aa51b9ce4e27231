"""Error feedback: what the ledger did not merge of a PR rides along in the participant's next delta."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from woolf.core.merge import compute_delta
from woolf.forges.local import LocalForge
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.protocol import layout
from woolf.validator import Validator


def _delta_of(led, sub_id):
    pr = LocalForge.for_ledger(led).get(sub_id)
    _, ptr_rel, _ = layout.submission_paths(sub_id)
    return load_file(led.store.fetch_object(led.pointer(pr.head, ptr_rel)))


def test_rejected_delta_is_carried_into_the_next_one(make_net):
    net = make_net(**{"policy.min_improvement": "10"})  # nothing can pass: every PR is rejected
    alice, val = net.clone("alice"), net.clone("val")
    first = net.train_submit(alice, "alice")
    [v] = Validator(val, device="cpu").run()
    assert not v.accepted
    train(alice, TrainOptions(steps=5, contributor="alice", seed=3))
    trained = load_file(alice.root / ".woolf" / "work" / "trained.safetensors")
    base = alice.load_weights(alice.head())
    second = submit(alice, SubmitOptions(contributor="alice", error_feedback=True))
    assert "100% of " + first["id"] in second["error_feedback"]
    d1, d2 = _delta_of(val, first["id"]), _delta_of(val, second["id"])
    own = compute_delta(trained, base)
    for k in d2:
        assert torch.allclose(d2[k], own[k] + d1[k], atol=1e-6)
    # the second (still open) is not looked at yet: a third PR carries nothing
    train(alice, TrainOptions(steps=5, contributor="alice", seed=4))
    third = submit(alice, SubmitOptions(contributor="alice", error_feedback=True))
    assert third["error_feedback"] == ""
    # once the second is rejected, a fourth carries only its own part, not the first's again
    Validator(val, device="cpu").run()
    train(alice, TrainOptions(steps=5, contributor="alice", seed=5))
    trained4 = load_file(alice.root / ".woolf" / "work" / "trained.safetensors")
    fourth = submit(alice, SubmitOptions(contributor="alice", error_feedback=True))
    assert second["id"] in fourth["error_feedback"] and third["id"] in fourth["error_feedback"]
    d3, d4 = _delta_of(val, third["id"]), _delta_of(val, fourth["id"])
    own4 = compute_delta(trained4, base)
    for k in d4:
        assert torch.allclose(d4[k], own4[k] + own[k] + d3[k], atol=1e-5)


def test_attenuated_remainder_is_carried_and_off_by_default(network):
    alice, bob, val = network.clone("alice"), network.clone("bob"), network.clone("val")
    a = network.train_submit(alice, "alice")
    network.train_submit(bob, "bob")
    Validator(val, device="cpu").run(ids=[x.id for x in LocalForge.for_ledger(val).list(state="open")
                                          if x.contributor == "bob"])
    [va] = Validator(val, device="cpu").run()  # alice's PR merges at staleness 1: half of it
    assert va.accepted and va.attenuation == 0.5
    train(alice, TrainOptions(steps=5, contributor="alice"))
    assert submit(alice, SubmitOptions(contributor="alice"))["error_feedback"] == ""  # off unless asked
    train(alice, TrainOptions(steps=5, contributor="alice", seed=1))
    result = submit(alice, SubmitOptions(contributor="alice", error_feedback=True))
    assert "50% of " + a["id"] in result["error_feedback"]
