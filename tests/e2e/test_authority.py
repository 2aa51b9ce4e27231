"""Issue 12's attacks that need a merge first: forged verdicts and moved refs refused by the hub, a rewound main reported by the audit."""

from __future__ import annotations

import pytest

from tests.audit.test_authority import _forged_version, _verdict
from tests.conftest import key_for
from tests.crafting import craft_pr, force_ref, push, random_delta, refused
from woolf.audit.recompute import audit
from woolf.errors import IntegrityError
from woolf.forges.local import LocalForge
from woolf.protocol import layout
from woolf.validator import Validator


def test_hub_refuses_forged_verdicts_moved_or_deleted_pr_refs_and_stray_refs(network):
    alice, mallory = network.clone("alice"), network.clone("mallory")
    victim = craft_pr(alice, tensors=random_delta(alice), who="alice", sign_key=key_for("alice"))
    mallory.fetch()
    forge = LocalForge.for_ledger(mallory)
    pr = forge.get(victim)
    ref = f"{layout.PR_PREFIX}/{victim}"
    # a forged "rejected" verdict on someone else's PR: unsigned, and signed by a contributor's key
    assert refused(push(mallory, f"{_verdict(mallory, pr, 'rejected')}:{ref}/verdict"), "no signature")
    signed = _verdict(mallory, pr, "rejected", key=key_for("bob"))
    assert refused(push(mallory, f"{signed}:{ref}/verdict"), "bob, who is not a validator")
    # nor may anyone but alice (or a validator) withdraw it
    assert refused(push(mallory, f"{_verdict(mallory, pr, 'withdrawn', key_for('bob'))}:{ref}/verdict"),
                   "withdrawal may also be signed by alice")
    # a forged "merged v42" verdict: a version commit that does not land on main
    v42 = _forged_version(mallory, pr, key=key_for("val"))
    assert refused(push(mallory, f"{v42}:{ref}/verdict"), "lands together with main")
    # another contributor's PR head force-pushed, or deleted; a verdict ref deleted
    mine = craft_pr(mallory, tensors=random_delta(mallory, seed=3))
    other_head = forge.get(mine).head
    assert refused(push(mallory, f"+{other_head}:{ref}/head"), "created once and never moved")
    assert push(mallory, f":{ref}/head").returncode != 0
    # refs outside the ledger's namespace
    assert refused(push(mallory, f"{pr.head}:refs/heads/evil"), "accepts only main")
    assert refused(push(mallory, f"{pr.head}:refs/tags/v999"), "accepts only main")
    # the victim is still open, and the validator merges it as alice's
    assert LocalForge.for_ledger(network.clone("carol")).get(victim).state == "open"
    verdicts = {v.id: v for v in Validator(network.clone("val"), device="cpu").run()}
    assert verdicts[victim].accepted and verdicts[victim].contributor == "alice"
    # the merged verdict cannot be replaced or removed afterwards
    assert refused(push(mallory, f"+{signed}:{ref}/verdict"), "created once and never moved")
    # where a forge cannot refuse: a forged rejection and a forged "merged v42" are reported by the audit
    other = LocalForge.for_ledger(mallory).get(mine)
    force_ref(network.hub, mallory.root, _verdict(mallory, other, "rejected"), f"{layout.PR_PREFIX}/{mine}/verdict")
    third = forge.get(craft_pr(mallory, tensors=random_delta(mallory, seed=4)))
    force_ref(network.hub, mallory.root, _forged_version(mallory, third, key=key_for("val")),
              f"{layout.PR_PREFIX}/{third.id}/verdict")
    problems = [p["problem"] for p in audit(network.clone("auditor")).problems]
    assert any(f"PR {mine}'s rejected verdict" in p and "no signature" in p for p in problems), problems
    assert any(f"PR {third.id}'s merged verdict" in p and "not on main" in p for p in problems), problems


def test_rewind_and_commit_without_trailers(network):
    alice, val = network.clone("alice"), network.clone("val")
    network.train_submit(alice, "alice")
    [verdict] = Validator(val, device="cpu").run()
    assert verdict.accepted
    mallory = network.clone("mallory")
    v0, v1 = mallory.show(0).commit, mallory.show(1).commit
    assert refused(push(mallory, f"+{v0}:refs/heads/main"), "only moves forward")
    assert push(mallory, ":refs/heads/main").returncode != 0
    craft_pr(mallory, tensors=random_delta(mallory))  # open, so a validator has something to build
    plain = mallory.git.commit_tree(f"{v1}^{{tree}}", "just a commit\n", [v1])
    assert refused(push(mallory, f"{plain}:refs/heads/main"), "not a version commit")
    # where the forge cannot refuse: a commit without trailers stops validators; audit reports it
    force_ref(network.hub, mallory.root, plain, "refs/heads/main")
    with pytest.raises(IntegrityError, match="not a version commit"):
        Validator(network.clone("v1"), device="cpu").run()
    report = audit(network.clone("auditor"))
    assert any(p["version"] == 2 and "not a version commit" in p["problem"] for p in report.problems)
    # a rewind to version 0: the merged verdict of version 1 is off main
    force_ref(network.hub, mallory.root, v0, "refs/heads/main")
    report = audit(network.clone("auditor2"))
    assert not report.ok
    assert any(p["version"] == 1 and "not on main's first-parent chain" in p["problem"]
               for p in report.problems)
