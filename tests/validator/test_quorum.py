"""Issue 14: a k-of-n quorum of signed votes, through a real hub, real validators and the audit."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import key_for
from tests.crafting import craft_pr, force_ref, push, random_delta, refused
from woolf.audit.recompute import audit
from woolf.demo.dishonest import DishonestValidator
from woolf.errors import IntegrityError
from woolf.forges.local import LocalForge
from woolf.ledger.change import set_signer
from woolf.protocol.rules.quorum import version_quorum_problem
from woolf.protocol.signers import signers_text
from woolf.protocol.tally import Ballot, tally
from woolf.protocol.trailers import format_message, parse_message
from woolf.protocol.votes import read_votes, vote_ref
from woolf.validator import Validator

QUORUM = {"validators.quorum": "2", "policy.min_improvement": "-10"}


@pytest.mark.unit
def test_tally_agreement_arithmetic():
    a = Ballot("v1", "a" * 40, "accept", "c" * 64, 2.0, "m")
    b = Ballot("v2", "b" * 40, "accept", "c" * 64, 2.0005, "m")
    far = Ballot("v3", "d" * 40, "accept", "c" * 64, 1.0, "m")  # invented metrics
    other = Ballot("v3", "e" * 40, "accept", "f" * 64, 2.0, "m")  # another candidate
    rej = [Ballot(f"r{i}", f"{i}" * 40, "reject") for i in range(2)]
    assert tally([a], 2, 1e-3).state == "pending"
    out = tally([a, b, far], 2, 1e-3)
    assert out.state == "merged" and out.candidate == "c" * 64 and out.dissent == ("v3",)
    assert tally([a, far], 2, 1e-3).state == "pending" and tally([a, other], 2, 1e-3).state == "pending"
    assert tally([a, b], 2, 1e-4).state == "pending"  # metrics beyond epsilon disagree
    assert tally([a, *rej], 2, 1e-3).state == "rejected"
    assert tally([a, *rej, b], 2, 1e-3).state == "rejected"  # a 2-2 tie goes to the conservative side
    dup = Ballot("v1", "f" * 40, "accept", "c" * 64, 2.0, "m")  # one validator counts once
    assert tally([a, dup], 2, 1e-3).state == "pending"
    with pytest.raises(ValueError):
        tally([a], 0, 1e-3)


@pytest.mark.unit
def test_named_votes_are_bounded():
    """Woolf-Votes is attacker-writable wherever a verdict is read: nesting, length and shape are refused
    with a reason (a deeply nested list raised RecursionError out of json.loads before)."""
    from woolf.protocol.rules.quorum import named_votes

    sha = "a" * 40
    assert named_votes({}) == (None, None)
    assert named_votes({"Woolf-Votes": f'["{sha}", "{sha}"]'}) == ([sha], None)
    assert named_votes({"Woolf-Votes": "[" * 100_000 + "]" * 100_000}) == (None, "Woolf-Votes is not a JSON list")
    assert "at most 64" in named_votes({"Woolf-Votes": "[" + ",".join([f'"{sha}"'] * 65) + "]"})[1]
    assert "at most 64" in named_votes({"Woolf-Votes": '["not a sha"]'})[1]


def test_quorum_of_two_merges_only_when_two_agree_and_audit_checks_the_votes(make_net):
    net = make_net(**QUORUM)
    alice = net.clone("alice")
    sub = net.train_submit(alice, "alice")["id"]
    v1, v2 = Validator(net.clone("v1"), device="cpu"), Validator(net.clone("v2"), device="cpu")
    assert v1.run() == []  # one vote is no quorum: the PR stays open
    forge = LocalForge.for_ledger(v1.ledger)
    assert forge.get(sub).state == "open"
    [verdict] = v2.run()
    assert verdict.accepted and verdict.version == 1
    seen = net.clone("observer")
    head = seen.head()
    _, fields = parse_message(seen.git.message(head.commit))
    assert len(json.loads(fields["Woolf-Votes"])) == 2
    # the same votes under made-up metrics, or under other weights, are no quorum for that version
    lied = {**fields, "Woolf-Metrics-After": json.dumps({"loss": 0.1})}
    assert "but its votes measured" in version_quorum_problem(seen.git, head.commit, head.parents, lied)
    other = {**fields, "Woolf-Weights-Sha256": "0" * 64}
    assert "not the candidate" in version_quorum_problem(seen.git, head.commit, head.parents, other)
    assert "list of at most" in version_quorum_problem(seen.git, head.commit, head.parents,
                                                       {**fields, "Woolf-Votes": '["x"]'})
    assert v1.run() == []  # settled: nothing for the first voter to do
    report = audit(net.clone("auditor3"))
    assert report.ok, report.problems


def test_dishonest_validator_alone_merges_nothing(make_net, cli):
    net = make_net(**{"validators.quorum": "2", "policy.min_improvement": "5"})  # honest gate: reject
    alice = net.clone("alice")
    sub = net.train_submit(alice, "alice")["id"]
    liar = DishonestValidator(net.clone("v3"), device="cpu")
    assert liar.run() == []
    v1 = Validator(net.clone("v1"), device="cpu")
    assert v1.run() == []  # accept (liar) vs reject (v1): no quorum
    [verdict] = Validator(net.clone("v2"), device="cpu").run()
    assert verdict.state == "rejected" and not verdict.accepted
    obs = net.clone("observer")
    assert obs.head().version == 0
    pr = LocalForge.for_ledger(obs).get(sub)
    assert pr.state == "rejected"
    assert audit(net.clone("auditor")).ok
    proc = cli("validators", "--json", cwd=obs.root)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["validators"]}
    assert rows["v3"]["flagged"] and rows["v3"]["disagreed"] == 1 and rows["v3"]["votes"] == 1
    assert not rows["v1"]["flagged"] and rows["v1"]["agreed"] == 1 and rows["v2"]["agreed"] == 1
    assert rows["v1"]["median_eval_seconds"] > 0 and rows["val"]["votes"] == 0


def test_forged_versions_are_refused_ignored_and_audited(make_net):
    net = make_net(**QUORUM)
    mallory = net.clone("mallory")
    sub = craft_pr(mallory, tensors=random_delta(mallory))
    liar = DishonestValidator(net.clone("v3"), device="cpu")
    liar.run()  # one (dishonest) accept vote exists
    val = net.clone("val")  # a validator key used to forge the version by hand
    val.fetch()
    head, pr = val.head("refs/remotes/origin/main"), LocalForge.for_ledger(val).get(sub)
    ballots, _ = read_votes(val.git, sub, signers_text(val.git, head.commit), "loss")
    [lie] = ballots

    def forged(votes):
        msg = format_message(f"woolf: version {head.version + 1}", {
            "Woolf-Version": head.version + 1, "Woolf-Submission": sub, "Woolf-Contributor": "mallory",
            "Woolf-Base-Version": 0, "Woolf-Staleness": 0, "Woolf-Attenuation": 1.0, "Woolf-Alpha": 1.0,
            "Woolf-Weights-Sha256": lie.candidate, "Woolf-Metrics-After": {"loss": lie.metric},
            "Woolf-Votes": votes})
        return val.git.commit_tree_with(head.commit, {}, msg, [head.commit, pr.head])

    too_few, none = forged([lie.commit]), forged(None)
    assert refused(push(val, f"{too_few}:refs/heads/main", f"{too_few}:refs/woolf/pr/{sub}/verdict"),
                   "no quorum of 2")
    assert refused(push(val, f"{none}:refs/heads/main"), "a merge without votes")
    # nor may one validator reject alone
    rejection = val.git.commit_tree(f"{pr.head}^{{tree}}", format_message("woolf: rejected", {
        "Woolf-Verdict": "rejected", "Woolf-Submission": sub, "Woolf-Reason": "alone", "Woolf-Main": head.commit}),
        [pr.head])
    proc = push(val, f"{rejection}:refs/woolf/pr/{sub}/verdict")
    assert refused(proc, "a rejection without a quorum of 2"), proc.stderr
    # a vote ref of v1's name signed by the liar's key (one key voting twice) is refused by the hub
    twice = liar.ledger.git.commit_tree(f"{pr.head}^{{tree}}", format_message("vote", {
        "Woolf-Vote": "accept", "Woolf-Submission": sub, "Woolf-Main": head.commit, "Woolf-Voter": "v1",
        "Woolf-Candidate-Sha256": lie.candidate, "Woolf-Metrics-After": {"loss": lie.metric}}), [pr.head])
    assert refused(push(liar.ledger, f"{twice}:{vote_ref(sub, 'v1')}"), "signed by v3 but cast as v1")
    # where a forge cannot refuse: the duplicate is ignored; the version is audited and not built on
    force_ref(net.hub, liar.ledger.root, twice, vote_ref(sub, "v1"))
    again = forged([lie.commit, twice])
    force_ref(net.hub, val.root, again, "refs/heads/main")
    with pytest.raises(IntegrityError, match="no quorum of 2"):
        Validator(net.clone("v1"), device="cpu").run()
    problems = [p["problem"] for p in audit(net.clone("auditor")).problems]
    assert any("no quorum of 2" in p and "signed by v3 but cast as v1" in p for p in problems), problems


def test_bad_votes_are_ignored_with_a_reason_and_block_nothing(make_net):
    net = make_net(**QUORUM)
    alice = net.clone("alice")
    # bob's PR reaches the hub first (signed PRs are served in the hub's receipt order: issue 25)
    other = craft_pr(net.clone("bob"), tensors=random_delta(alice, seed=4), who="bob")
    sub = net.train_submit(alice, "alice")["id"]
    v3 = Validator(net.clone("v3"), device="cpu")
    v3.run()
    v3.ledger.fetch()
    forge = LocalForge.for_ledger(v3.ledger)
    pr, pr2 = forge.get(sub), forge.get(other)
    main = v3.ledger.head("refs/remotes/origin/main").commit
    git = v3.ledger.git
    # malformed votes and a vote about another PR, forced past the hub (an unprotected forge)
    junk = git.commit_tree(f"{pr.head}^{{tree}}", "no trailers\n", [pr.head])
    wrong = git.commit_tree(f"{pr2.head}^{{tree}}", format_message("vote", {
        "Woolf-Vote": "accept", "Woolf-Submission": sub, "Woolf-Main": main, "Woolf-Voter": "v1",
        "Woolf-Candidate-Sha256": "0" * 64}), [pr2.head])
    assert refused(push(v3.ledger, f"{junk}:{vote_ref(sub, 'v3x')}"), "not a vote on this PR")
    force_ref(net.hub, v3.ledger.root, junk, vote_ref(sub, "v4"))
    force_ref(net.hub, v3.ledger.root, wrong, vote_ref(other, "v1"))
    v3.ledger.fetch()
    _, ignored2 = read_votes(git, other, None, "loss")
    assert "another PR" in dict(ignored2)[vote_ref(other, "v1")]
    # revoke v3's key on main: its vote no longer counts
    set_signer(net.work, "v3", None)
    v1 = Validator(net.clone("v1"), device="cpu")
    assert v1.run() == []  # v3's vote is revoked, v4's is junk: no quorum yet, and nothing crashed
    ballots, ignored = read_votes(v1.ledger.git, sub, signers_text(v1.ledger.git, v1.ledger.head().commit), "loss")
    why = dict(ignored)
    assert [b.validator for b in ballots] == ["v1"]
    assert "no Woolf-Vote" in why[vote_ref(sub, "v4")]
    assert "v3, who is not a validator" in why[vote_ref(sub, "v3")] or "not in allowed_signers" in why[
        vote_ref(sub, "v3")], why
    # bob's PR (first in the queue) settles despite the junk under it; alice's waits for votes
    # against the new main, and settles on the next pass
    [first] = Validator(net.clone("v2"), device="cpu").run()
    assert first.id == other and first.accepted
    [second] = v1.run()
    assert second.id == sub and second.accepted and second.version == 3


def test_a_candidate_dropped_from_memory_is_made_again_when_its_quorum_arrives(make_net, monkeypatch):
    import woolf.validator.quorum as voter
    from woolf.protocol.votes import push_vote
    from woolf.timing import Timer
    from woolf.validator.step import fresh

    monkeypatch.setattr(voter, "KEEP_STEPS", 0)
    net = make_net(**QUORUM)
    mallory = net.clone("mallory")
    craft_pr(mallory, tensors=random_delta(mallory))
    craft_pr(mallory, tensors=random_delta(mallory, seed=1))
    v1 = Validator(net.clone("v1"), device="cpu")
    assert v1.run() == []  # votes on both; the first one's candidate is dropped from memory
    [first] = [i for i, j in v1.state.judged.items() if j.step is None]
    assert len(v1.state.judged) == 2
    v2 = Validator(net.clone("v2"), device="cpu")  # v2 votes on that PR and stops (as if it crashed)
    pr, main = fresh(v2.ctx, first)
    verdict, _, sha = voter.judge(v2.ctx, pr, main, Timer())
    push_vote(v2.ledger, pr, *voter.make_ballot(v2.ctx, pr, main, verdict, sha, Timer()))
    [merged] = v1.run(ids=[first])
    assert merged.id == first and merged.accepted and merged.version == 1


def test_an_unreadable_config_fails_closed(network):
    """Its quorum unknown, nothing resting on it passes: defaults (quorum 1) never stand in."""
    from woolf.protocol.rules.quorum import rejection_quorum_problem

    git = network.work.git
    empty_tree = git.out("hash-object", "-t", "tree", "-w", "/dev/null")
    no_config = git.out("commit-tree", empty_tree, "-m", "no config")
    fields = {"Woolf-Version": "1", "Woolf-Votes": None}
    assert "quorum is unknown" in version_quorum_problem(git, "0" * 40, [no_config, no_config], fields)
    assert "quorum is unknown" in rejection_quorum_problem(git, "x", {}, no_config)
    head = network.work.head().commit
    assert version_quorum_problem(git, "0" * 40, [head, head], fields) is None  # quorum 1: no votes needed


def test_one_validator_below_the_quorum_cannot_expire_a_pr(make_net):
    """Issue 25, breach 1: under quorum 2 of 3, v1 signs a reject vote back-dated 2 hours and an `expired`
    verdict naming only it. The real hook refuses both; where a forge lets them in unhooked, the audit
    names the expiry."""
    from tests.gitobjects import commit_tree

    net = make_net(**QUORUM)
    mallory = net.clone("mallory")
    sub = craft_pr(mallory, tensors=random_delta(mallory))
    v1 = net.clone("v1")
    v1.fetch()
    head, pr = v1.head("refs/remotes/origin/main"), LocalForge.for_ledger(v1).get(sub)
    tree = v1.git.out("rev-parse", f"{pr.head}^{{tree}}")
    then = int(time.time()) - 7200
    vote = commit_tree(v1.root, tree, format_message("woolf: vote reject", {
        "Woolf-Vote": "reject", "Woolf-Submission": sub, "Woolf-Main": head.commit, "Woolf-Voter": "v1",
        "Woolf-Reason": "no"}), [pr.head], key_for("v1"), then)
    assert refused(push(v1, f"{vote}:{vote_ref(sub, 'v1')}"), "off the hub's clock")
    expired = commit_tree(v1.root, tree, format_message("woolf: expired", {
        "Woolf-Verdict": "expired", "Woolf-Submission": sub, "Woolf-Reason": "no quorum in time",
        "Woolf-Votes": [vote]}), [pr.head], key_for("v1"))
    force_ref(net.hub, v1.root, vote, vote_ref(sub, "v1"))  # a forge without the hook took the vote
    assert refused(push(v1, f"{expired}:refs/woolf/pr/{sub}/verdict"), "names votes of 1 validator(s)")
    force_ref(net.hub, v1.root, expired, f"refs/woolf/pr/{sub}/verdict")
    problems = [p["problem"] for p in audit(net.clone("auditor")).problems]
    assert any(f"PR {sub}'s expired verdict" in p and "votes of 1 validator(s)" in p for p in problems), problems
