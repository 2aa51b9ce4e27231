"""Authority (woolf/audit/authority.py and the hook's rules it shares): each attack against a hub made by
`woolf hub init` is refused at push time, or (where a forge cannot refuse: `force_ref`) ignored by validators
and reported by `woolf audit`."""

from __future__ import annotations

import pytest

from tests.conftest import key_for
from tests.crafting import craft_pr, force_ref, push, random_delta, refused
from woolf.audit.recompute import audit
from woolf.errors import ConfigError, ForgeError, IntegrityError, UsageError
from woolf.forges.local import LocalForge
from woolf.ledger.change import set_config
from woolf.participant import TrainOptions
from woolf.protocol import layout
from woolf.protocol.trailers import format_message
from woolf.validator import Validator


def _verdict(led, pr, state: str, key=None, extra=None) -> str:
    """A hand-made verdict commit on ``pr``'s head, signed with ``key`` (None: unsigned)."""
    led.git.sign_key = str(key) if key else None
    fields = {"Woolf-Verdict": state, "Woolf-Submission": pr.id, "Woolf-Reason": "forged", **(extra or {})}
    return led.git.commit_tree(f"{pr.head}^{{tree}}", format_message(f"woolf: {state}", fields), [pr.head])


def _forged_version(led, pr, key=None) -> str:
    """A version commit whose arithmetic would be consistent but that no validator made."""
    head = led.head("refs/remotes/origin/main")
    led.git.sign_key = str(key) if key else None
    msg = format_message(f"woolf: version {head.version + 1}", {
        "Woolf-Version": head.version + 1, "Woolf-Submission": pr.id, "Woolf-Contributor": "mallory",
        "Woolf-Base-Version": head.version, "Woolf-Staleness": 0, "Woolf-Attenuation": 1.0, "Woolf-Alpha": 1.0,
        "Woolf-Weights-Sha256": head.weights_sha256, "Woolf-Metrics-After": {"loss": 4.1}})
    return led.git.commit_tree_with(head.commit, {}, msg, [head.commit, pr.head])


def test_ungated_version_on_main_refused_ignored_and_audited(network):
    mallory, val = network.clone("mallory"), network.clone("val")
    sub = craft_pr(mallory, tensors=random_delta(mallory))
    mallory.fetch()
    pr = LocalForge.for_ledger(mallory).get(sub)
    forged = _forged_version(mallory, pr)
    assert refused(push(mallory, f"{forged}:refs/heads/main"), "no signature (needs a validator key)")
    by_contributor = _forged_version(mallory, pr, key=key_for("alice"))
    assert refused(push(mallory, f"{by_contributor}:refs/heads/main"), "alice, who is not a validator")
    # a forge that cannot refuse: validators do not build on it, the audit names it
    force_ref(network.hub, mallory.root, forged, "refs/heads/main")
    with pytest.raises(IntegrityError, match="not trusted: no signature"):
        Validator(val, device="cpu").run()
    report = audit(network.clone("auditor"))
    assert not report.ok and report.signed
    assert any(p["version"] == 1 and "no signature" in p["problem"] for p in report.problems)
    assert any(p["version"] == 1 and f"merges {sub}, whose verdict ref is not this version" in p["problem"]
               for p in report.problems)


def test_config_carries_no_code(network):
    work = network.work  # the maintainer's clone
    with pytest.raises(ConfigError, match="names code"):
        set_config(work, {"workload.name": "subprocess:run", "workload.params.args": '["touch", "/tmp/pwned"]'})
    # pushed by someone who is not a maintainer: the hub refuses it
    mallory = network.clone("mallory")
    head = mallory.head("refs/remotes/origin/main")
    toml = mallory.git.show_bytes(f"{head.commit}:{layout.CONFIG}").decode().replace(
        'name = "charlm"', 'name = "subprocess:run"')
    msg = format_message("woolf: change", {"Woolf-Version": head.version + 1, "Woolf-Change": "config",
                                           "Woolf-Weights-Sha256": head.weights_sha256})
    craft_pr(mallory, tensors=random_delta(mallory))  # open, so a validator has something to build
    for key in (None, key_for("val")):
        mallory.git.sign_key = str(key) if key else None
        change = mallory.git.commit_tree_with(head.commit, {layout.CONFIG: toml.encode()}, msg, [head.commit])
        assert refused(push(mallory, f"{change}:refs/heads/main"), "needs a maintainer key"
                       if key is None else "val, who is not a maintainer")
    # where the forge cannot refuse: `woolf train` refuses the config, so do validators
    force_ref(network.hub, mallory.root, change, "refs/heads/main")
    alice = network.clone("alice")
    from woolf.participant import train

    with pytest.raises(IntegrityError, match="not a maintainer"):
        train(alice, TrainOptions(steps=1, contributor="alice"))
    with pytest.raises(ConfigError, match="names code"):  # the validator loads the workload first
        Validator(network.clone("val"), device="cpu").run()


def test_maintainer_change_is_a_version_validators_build_on(network):
    alice, val = network.clone("alice"), network.clone("val")
    sub = network.train_submit(alice, "alice")
    v = set_config(network.work, {"policy.min_improvement": "-20"}, reason="looser gate")
    assert v.version == 1 and v.subject.startswith("woolf: version 1, config change")
    [verdict] = Validator(val, device="cpu").run()
    assert verdict.id == sub["id"] and verdict.accepted and verdict.version == 2 and verdict.staleness == 1
    report = audit(network.clone("auditor"))
    assert report.ok, report.problems
    # a validator key may not make a change
    with pytest.raises(ForgeError, match="val, who is not a maintainer"):
        set_config(val, {"policy.min_improvement": "-30"})


def test_identity_is_one_thing(network):
    mallory, val = network.clone("mallory"), network.clone("val")
    # the id says mallory, submission.json says alice
    claim = craft_pr(mallory, tensors=random_delta(mallory), meta_patch={"contributor": "alice"})
    # id and submission.json say alice, but the commit is signed by bob's listed key
    stolen = craft_pr(mallory, tensors=random_delta(mallory, seed=2), who="alice", sign_key=key_for("bob"))
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert "PR id names contributor 'mallory' but submission.json says 'alice'" in verdicts[claim].reason
    assert "signed by bob's key but claims to be from alice" in verdicts[stolen].reason
    assert not verdicts[claim].accepted and not verdicts[stolen].accepted


def test_required_contributor_signatures(make_net):
    net = make_net(**{"signing.contributors": "required", "policy.min_improvement": "-10"})
    dave, alice, val = net.clone("dave"), net.clone("alice"), net.clone("val")
    unsigned = net.train_submit(dave, "dave")
    signed = net.train_submit(alice, "alice")
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert "requires submissions signed" in verdicts[unsigned["id"]].reason
    assert verdicts[signed["id"]].accepted


def test_validator_needs_a_validator_key(network):
    craft_pr(network.clone("sub"), tensors=random_delta(network.clone("sub2")))
    with pytest.raises(UsageError, match="needs its SSH key"):
        Validator(network.clone("dave"), device="cpu").run()
    alice = network.clone("alice")
    with pytest.raises(UsageError, match="not a validator key"):
        Validator(alice, device="cpu").run()


def test_unsigned_ledger_keeps_working_and_audit_says_so(make_net):
    net = make_net(signed=False, **{"policy.min_improvement": "-10"})
    alice, val = net.clone("alice"), net.clone("val")
    net.train_submit(alice, "alice")
    [verdict] = Validator(val, device="cpu").run()
    assert verdict.accepted
    report = audit(net.clone("auditor"))
    assert report.ok and not report.signed and "unsigned ledger" in report.notes[0]
    # the hub still enforces the shape rules
    mallory = net.clone("mallory")
    assert refused(push(mallory, f"+{mallory.show(0).commit}:refs/heads/main"), "only moves forward")


def test_change_version_keeps_the_merge_rules_state(make_net):
    net = make_net(**{"merge.rule": "nesterov", "policy.min_improvement": "-10"})
    alice, bob, val = net.clone("alice"), net.clone("bob"), net.clone("val")
    net.train_submit(alice, "alice")
    assert Validator(val, device="cpu").run()[0].version == 1
    change = set_config(net.work, {"merge.max_staleness": "8"})
    assert change.version == 2 and change.state_sha256 and change.state_sha256 == val.show(1).state_sha256
    net.train_submit(bob, "bob", seed=1)
    [verdict] = Validator(val, device="cpu").run()
    assert verdict.accepted and verdict.version == 3
    report = audit(net.clone("auditor"))
    assert report.ok, report.problems
