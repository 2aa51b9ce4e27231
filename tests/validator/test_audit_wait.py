"""A drawn PR's states on demand (woolf/validator/audit_wait.py): each bad answer gets one clear line and
nothing merges; a keyless PR's garbage answers are skipped; a missed deadline is a rejection that says so."""

from __future__ import annotations

import time

import pytest
from safetensors.torch import load_file, save_file

from woolf.errors import ForgeError
from woolf.forges.local import LocalForge
from woolf.ledger.challenges import challenges, post_answer
from woolf.participant.proof import proof_root
from woolf.participant.prove import prove_once
from woolf.protocol.challenge import StatePin
from woolf.storage.files import hashes_of_file
from woolf.validator import Validator

RETRAIN = {"validators.retrain_rate": "1", "policy.min_improvement": "-10"}


def _challenged(net, who: str, key: str | None = None):
    """(participant clone, validator clone, PR, the validator's challenge): trained, submitted, challenged."""
    p, val = net.clone(who, key=key), net.clone("val")
    pr = net.train_submit(p, who)
    assert Validator(val, device="cpu", name="v1").run() == []  # challenged: waiting
    forge = LocalForge.for_ledger(p)
    p.fetch()
    got = forge.get(pr["id"], fetch=False)
    [c] = challenges(p, forge, got).values()
    return p, val, got, c


def _garbage_pin(led, tmp_path, data: bytes) -> StatePin:
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(data)
    md5, sha = hashes_of_file(path)
    size = path.stat().st_size
    led.store.put(path, "proof-state.safetensors", md5=md5)
    return StatePin(md5, size, sha)


def test_a_missed_deadline_is_a_rejection_that_says_so(make_net):
    net = make_net(**RETRAIN, **{"proof.deadline": "1"})
    _, val, pr, c = _challenged(net, "alice")
    time.sleep(max(0.0, c.deadline - time.time()) + 1.1)
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "rejected" and v.reason.startswith(
        f"retrain: its challenge (segments {', '.join(map(str, c.segments))}) was not answered by its deadline")
    assert v.reason.endswith("; no valid answer came") and v.retrain["retrain"] == "unanswered"
    assert "retrain-failed" not in v.flags  # offline is not cheating


def test_a_signed_answer_whose_state_is_not_its_link_is_rejected(make_net):
    net = make_net(**RETRAIN)
    alice, val, pr, _ = _challenged(net, "alice")
    run = proof_root(alice) / pr.id
    for f in run.glob("link-*.safetensors"):  # the kept states, edited before they are served
        state = load_file(f)
        state["params/head.weight"][0, 0] += 1.0
        save_file(state, f)
    prove_once(alice)
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "rejected" and v.reason.endswith("'s state does not digest to its link in the chain")
    assert v.reason.startswith("retrain: segment ") and v.retrain["retrain"] == "failed"


@pytest.mark.parametrize("case", ["oversized", "malformed", "other bytes"])
def test_a_signed_answer_with_a_bad_state_file_is_rejected(make_net, tmp_path, case):
    net = make_net(**RETRAIN)
    alice, val, pr, c = _challenged(net, "alice")
    pin = _garbage_pin(alice, tmp_path, b"not a safetensors file at all")
    if case == "oversized":
        pin = StatePin(pin.md5, 1 << 40, pin.sha256)
    elif case == "other bytes":
        pin = StatePin(pin.md5, pin.size, "0" * 64)
    post_answer(alice, LocalForge.for_ledger(alice), pr, c.commit, {i: pin for i in c.segments})
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "rejected", v.reason
    expect = {"oversized": "'s state file declares 1099511627776 bytes, over the",
              "malformed": "'s state file is malformed",
              "other bytes": "'s state file does not hash to the sha256 its answer names"}[case]
    assert expect in v.reason and v.reason.startswith("retrain: segment ")


def test_a_keyless_prs_garbage_answers_are_skipped_and_the_real_one_counts(make_net, tmp_path):
    net = make_net(**RETRAIN)
    dave, val, pr, c = _challenged(net, "dave")  # no key: anyone may answer its challenges
    mallory = net.clone("mallory")
    post_answer(mallory, LocalForge.for_ledger(mallory), pr, c.commit,
                {i: _garbage_pin(mallory, tmp_path, b"junk" * 10) for i in c.segments})
    assert Validator(val, device="cpu", name="v1").run() == []  # garbage: skipped, still waiting
    prove_once(dave)
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "merged" and v.retrain["retrain"] == "matched", v.reason


def test_a_signed_prs_challenge_answered_by_someone_else_is_refused_by_the_hub(make_net, tmp_path):
    net = make_net(**RETRAIN)
    alice, val, pr, c = _challenged(net, "alice")
    mallory = net.clone("mallory", key="bob")  # a listed key, not alice's
    with pytest.raises(ForgeError, match="only alice answers its challenges"):
        post_answer(mallory, LocalForge.for_ledger(mallory), pr, c.commit,
                    {i: _garbage_pin(mallory, tmp_path, b"junk") for i in c.segments})
    assert Validator(val, device="cpu", name="v1").run() == []  # still waiting for alice
    prove_once(alice)
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.state == "merged" and v.retrain["retrain"] == "matched"
