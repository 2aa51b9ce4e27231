"""The hub's rules for a proof's challenge and answer refs (woolf/protocol/rules/proof.py), through check_push.

Built on rules/test_push.py's hand-made hub: each push is the (old, new, ref) list the pre-receive hook
reads, every byte as an attacker who read the code could write it.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import key_for
from tests.gitobjects import Templates, commit_tree
from tests.protocol.rules.test_push import ALICE_PR, MALLORY_PR, ZERO, Hub
from woolf.protocol import layout
from woolf.protocol.challenge import MAX_CHALLENGES, answer_message, answer_ref, challenge_message, challenge_ref

pytestmark = pytest.mark.unit
PIN = {"md5": "0" * 32, "size": 10, "sha256": "1" * 64}


@pytest.fixture(scope="module")
def _templates(tmp_path_factory) -> Templates:
    return Templates(tmp_path_factory.mktemp("proof-rules"), Hub)


@pytest.fixture
def hub(tmp_path, _templates) -> Hub:
    return _templates.copy_for(tmp_path, True)


def _commit(hub: Hub, message: str, parent: str, key: str | None, when: int | None = None) -> str:
    return commit_tree(hub.repo, hub.tree, message, [parent], key_for(key) if key else None, when)


def _challenge(hub: Hub, parent: str, name: str = "val", key: str | None = "val", sub_id: str = ALICE_PR,
               deadline: int | None = None, when: int | None = None) -> str:
    now = int(time.time()) if when is None else when
    msg = challenge_message(sub_id, name, [1, 4], now + 600 if deadline is None else deadline, False)
    return _commit(hub, msg, parent, key, when)


def _answer(hub: Hub, parent: str, key: str | None = "alice", sub_id: str = ALICE_PR) -> str:
    return _commit(hub, answer_message(sub_id, "a" * 40, {1: PIN}), parent, key)


def test_a_validators_signed_challenge_lands_and_moves_only_forward(hub):
    head = hub.pr()
    c = _challenge(hub, head)
    ref = challenge_ref(ALICE_PR, "val")
    assert hub.push((ZERO, c, ref)) == []
    hub.set(ref, c)
    again = _challenge(hub, c)
    assert hub.push((c, again, ref)) == []
    assert hub.push((c, _challenge(hub, head), ref))[0].endswith("parent is the PR's head (the first) or the "
                                                                  "ref's previous challenge")
    assert hub.push((c, ZERO, ref)) == [f"{ref}: challenges are never deleted"]


@pytest.mark.parametrize("case, expect", [
    ("contributor's key", "signed by alice, who is not a validator"),
    ("unsigned", "needs a validator key"),
    ("another validator's key", "signed by val2, not by the validator val the ref names"),
    ("another name", "a challenge by val2 on val's ref"),
    ("back-dated", "off the hub's clock"),
    ("deadline", "deadline is after its commit time"),
    ("no PR", "for a pull request that does not exist"),
])
def test_a_challenge_not_made_by_its_validator_now_is_refused(hub, case, expect):
    head = hub.pr()
    ref = challenge_ref(ALICE_PR, "val")
    kw = {"contributor's key": {"key": "alice"}, "unsigned": {"key": None}, "another validator's key": {"key": "val2"},
          "another name": {"name": "val2", "key": "val2"}, "back-dated": {"when": int(time.time()) - 3600},
          "deadline": {"deadline": int(time.time()) - 1}, "no PR": {"sub_id": MALLORY_PR}}[case]
    if case == "no PR":
        ref = challenge_ref(MALLORY_PR, "val")
    [err] = hub.push((ZERO, _challenge(hub, head, **kw), ref))
    assert expect in err, err


def test_a_settled_pr_takes_no_challenge_and_a_ref_holds_a_bounded_number(hub):
    head = hub.pr()
    hub.set(f"{layout.PR_PREFIX}/{ALICE_PR}/verdict", hub.verdict(head))
    [err] = hub.push((ZERO, _challenge(hub, head), challenge_ref(ALICE_PR, "val")))
    assert "settled" in err
    other = hub.pr(MALLORY_PR)
    tip, ref = other, challenge_ref(MALLORY_PR, "val")
    for _ in range(MAX_CHALLENGES):
        nxt = _challenge(hub, tip, sub_id=MALLORY_PR)
        assert hub.push((ZERO if tip == other else tip, nxt, ref)) == []
        hub.set(ref, nxt)
        tip = nxt
    [err] = hub.push((tip, _challenge(hub, tip, sub_id=MALLORY_PR), ref))
    assert f"at most {MAX_CHALLENGES} challenges" in err


def test_only_its_contributor_answers_a_pr_its_key_signed(hub):
    # alice's PR head is unsigned in this hub: it is keyless, so anyone's answer lands (content decides)
    head = hub.pr()
    ref = answer_ref(ALICE_PR)
    assert hub.push((ZERO, _answer(hub, head, key=None), ref)) == []
    assert hub.push((ZERO, _answer(hub, head, key="bob"), ref)) == []
    signed = hub.pr("20260101T000000000Z-alice-0badcafe", opened=False)
    signed = commit_tree(hub.repo, hub.git.out("rev-parse", f"{signed}^{{tree}}"), "submission\n",
                         [hub.genesis], key_for("alice"))
    sub = "20260101T000000000Z-alice-0badcafe"
    hub.set(f"{layout.PR_PREFIX}/{sub}/head", signed)
    ref = answer_ref(sub)
    assert hub.push((ZERO, _answer(hub, signed, key="alice", sub_id=sub), ref)) == []
    [err] = hub.push((ZERO, _answer(hub, signed, key="bob", sub_id=sub), ref))
    assert err.endswith("alice's PR is signed by alice's key: only alice answers its challenges (this answer is "
                        "signed by bob)")
    [err] = hub.push((ZERO, _answer(hub, signed, key=None, sub_id=sub), ref))
    assert "(this answer is not signed)" in err


def test_a_malformed_answer_is_refused(hub):
    head = hub.pr()
    bad = _commit(hub, "woolf: answer\n\nWoolf-Answer: {\"challenge\": 1}\nWoolf-Submission: " + ALICE_PR + "\n",
                  head, None)
    [err] = hub.push((ZERO, bad, answer_ref(ALICE_PR)))
    assert "not an answer on this PR" in err
