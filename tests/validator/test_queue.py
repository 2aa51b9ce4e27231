"""The Validator's queue (woolf/validator/queue.py): one hostile PR never stops it: the hand-built corpus mixed
with honest PRs, queue order, data loss, red-team claims on names and storage, attacker text in names."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import key_for
from tests.crafting import craft_pr, craft_prs, next_second, random_delta
from tests.hostile_corpus import delta, new_id, push_ref, storage_object
from woolf.audit.recompute import audit
from woolf.errors import IntegrityError
from woolf.forges.local import LocalForge
from woolf.protocol import layout
from woolf.protocol.trailers import format_message
from woolf.validator import Validator


def test_any_failure_inside_one_pr_becomes_its_rejection(network, monkeypatch):
    """A bug that escapes every check (here a RecursionError raised by the merge stage) rejects that PR only."""
    from woolf.validator import stages

    val = network.clone("val")
    first = craft_pr(val, tensors=delta(val, seed=1), who="alice")
    second = craft_pr(val, tensors=delta(val, seed=2), who="bob")
    merge = stages.merge

    def buggy(ctx, cand):
        if cand.adm.meta["contributor"] == "alice":
            raise RecursionError("maximum recursion depth exceeded")
        return merge(ctx, cand)

    monkeypatch.setattr(stages, "STAGES", tuple(buggy if s is merge else s for s in stages.STAGES))
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert not verdicts[first].accepted and "RecursionError" in verdicts[first].reason
    assert verdicts[second].accepted
    assert LocalForge.for_ledger(val).get(first).state == "rejected"


def test_queue_order_is_when_the_forge_received_the_pr(network):
    """An id whose timestamp says 2000 does not jump the queue; the receive time (this clone's reflog) decides."""
    val, mallory, alice = network.clone("val"), network.clone("mallory"), network.clone("alice")
    early = craft_pr(alice, tensors=delta(alice, seed=1), who="alice")
    LocalForge.for_ledger(val).list()  # the validator receives the honest PR first
    next_second()  # reflog times have one-second resolution
    late = craft_pr(mallory, tensors=delta(mallory, seed=2))
    sub = new_id(stamp="20000101T000000000Z")
    head = mallory.git.out("rev-parse", f"{layout.PR_PREFIX}/{late}/head")
    push_ref(mallory, head, f"{layout.PR_PREFIX}/{sub}/head")  # a 2000-dated id, received last
    prs = LocalForge.for_ledger(val).list(state="open")
    assert [p.id for p in prs][0] == early and sub in [p.id for p in prs]
    assert sorted(p.id for p in prs)[0] == sub  # by the id's text it would have come first
    verdicts = Validator(val, device="cpu").run()
    assert verdicts[0].id == early and verdicts[0].accepted


def test_verdict_without_trailers_is_quarantined_not_raced(network, cli):
    val = network.clone("val")
    sub = craft_pr(val, tensors=delta(val))
    bare = val.git.commit_tree_with(val.head().commit, {}, "no trailers\n", parents=[])
    push_ref(val, bare, f"{layout.PR_PREFIX}/{sub}/verdict")
    assert Validator(val, device="cpu").run() == []  # before: 8 lost races, exit 8
    pr = LocalForge.for_ledger(val).get(sub)
    assert pr.state == "quarantined" and "no Woolf-Verdict" in pr.reason
    proc = cli("pr", "list", "--state", "quarantined", "--json", cwd=val.root)
    assert proc.returncode == 0 and [p["id"] for p in json.loads(proc.stdout)] == [sub]


def test_deleted_delta_and_weights_are_restored_before_the_push(network):
    """Storage lost the delta (and the current weights) during validation: the merge puts both back first."""
    val = network.clone("val")
    sub = craft_pr(val, tensors=delta(val), who="alice")
    pr = LocalForge.for_ledger(val).get(sub)
    ptr = val.pointer(pr.head, layout.submission_paths(sub)[1])
    val.store.fetch_object(ptr)  # the validator has downloaded it, then storage loses it
    val.load_weights(val.head())
    w0 = val.pointer(val.head().commit)
    for obj in (storage_object(network, ptr.md5), storage_object(network, w0.md5)):
        obj.unlink()
    [v] = Validator(val, device="cpu").run()
    assert v.accepted
    assert storage_object(network, ptr.md5).is_file() and storage_object(network, w0.md5).is_file()
    fresh = network.clone("fresh")
    assert audit(fresh).ok  # a fresh clone recomputes version 1 from storage alone
    fresh.checkout(0, network.root / "v0.safetensors")


# Red-team findings on the queue and identity: one crafted PR or storage object never stops the pass, and
# nobody's claim costs an honest contributor her PR or her rating. F8 (a corrupted old version's weights), F4
# (open-PR limit by impersonation), F13 (quorum PR whose delta never serves), F11 (the fair queue and Sybil
# names: documented, cheap per junk PR).


def _corrupt(net, ledger, version: int) -> None:
    """Overwrite a version's weights object in storage: same size, other bytes (storage is writable)."""
    ptr = ledger.pointer(ledger.show(version).commit)
    obj = net.root / "storage" / "files" / "md5" / ptr.md5[:2] / ptr.md5[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"\x01" * ptr.size)


def test_f8_corrupted_base_weights_reject_that_pr_and_the_pass_goes_on(network):
    alice = network.clone("alice")
    craft_pr(alice, tensors=random_delta(alice, scale=0.001, seed=1), who="alice")
    Validator(network.clone("val"), device="cpu").run()  # main is version 1
    mallory = network.clone("mallory")
    v0 = mallory.show(0)
    _corrupt(network, mallory, 0)
    bad = craft_pr(mallory, tensors=random_delta(mallory, scale=0.001, seed=2), base=v0)
    val2 = network.clone("val2")  # no copy of version 0 in its cache
    LocalForge.for_ledger(val2).list()  # mallory's PR is received first
    next_second()
    bob = network.clone("bob")
    good = craft_pr(bob, tensors=random_delta(bob, scale=0.001, seed=3), who="bob")
    verdicts = {v.id: v for v in Validator(val2, device="cpu").run()}
    assert not verdicts[bad].accepted and "weights of its base version 0 fail their recorded hash" \
        in verdicts[bad].reason, verdicts[bad].reason
    assert verdicts[good].accepted, verdicts[good].reason
    # the bad bytes are not kept: reading version 0 again fetches and checks again, and fails again
    with pytest.raises(IntegrityError):
        val2.load_weights(v0)


def _seen(val) -> None:
    """The validator's clone receives what is pushed so far; the next push is received a second later."""
    LocalForge.for_ledger(val).list()
    next_second()


def test_f4_claims_on_a_name_never_cost_its_owner_her_pr_or_her_rating(make_net):
    """Unsigned PRs claiming alice (who has a key) are nobody's (issue 25, breach 3): they use none of her
    open-PR limit, on the hub or in the queue, and none of her rating."""
    net = make_net(**{"policy.min_improvement": "-10", "queue.max_open_per_contributor": "1"})
    val, alice, mallory = net.clone("val"), net.clone("alice"), net.clone("mallory")
    early = craft_pr(mallory, raw=b"x" * 10, who="alice", sign_key=False)  # unsigned, claims alice, received first
    _seen(val)
    honest = craft_pr(alice, tensors=random_delta(alice, scale=0.001, seed=3), who="alice", sign_key=key_for("alice"))
    _seen(val)
    mismatch = craft_pr(mallory, raw=b"x" * 10, meta_patch={"contributor": "alice"})  # id says mallory
    _seen(val)
    later = craft_pr(mallory, raw=b"x" * 10, who="alice", sign_key=False)  # unsigned, claims alice
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert verdicts[honest].accepted, verdicts[honest].reason  # signed: unsigned claims use none of her limit
    assert not verdicts[later].accepted and "over the open-PR limit" not in verdicts[later].reason
    assert "submission.json says 'alice'" in verdicts[mismatch].reason and verdicts[mismatch].contributor is None
    prs = {p.id: p for p in LocalForge.for_ledger(net.clone("obs")).list()}
    assert prs[mismatch].contributor is None and prs[later].contributor is None and prs[early].contributor is None
    from woolf.ledger.verdicts import verdict_history

    rated = {r.id for r in verdict_history(val) if r.rated and r.contributor == "alice"}
    assert rated == {honest}


def test_f4_unsigned_junk_in_a_keyed_name_never_supersedes_her_pr(make_net):
    net = make_net(**{"policy.min_improvement": "-10", "queue.max_open_per_contributor": "1"})
    val, alice, mallory = net.clone("val"), net.clone("alice"), net.clone("mallory")
    honest = craft_pr(alice, tensors=random_delta(alice, scale=0.001, seed=3), who="alice")  # signed by alice
    _seen(val)
    junk = craft_pr(mallory, raw=b"x" * 10, who="alice", sign_key=False)
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert verdicts[honest].accepted, verdicts[honest].reason  # was: rejected as "superseded" by the junk
    assert not verdicts[junk].accepted and verdicts[junk].contributor is None


def test_f13_under_quorum_a_delta_storage_never_serves_is_settled(make_net):
    net = make_net(**{"validators.quorum": "2", "validators.vote_timeout": "2", "policy.min_improvement": "-10"})
    mallory = net.clone("mallory")
    sub = craft_pr(mallory, raw=b"\0" * 100)
    md5 = mallory.git.out("show", f"refs/woolf/pr/{sub}/head:submissions/{sub}/submission.json")
    md5 = json.loads(md5)["delta"]["md5"]
    (net.root / "storage" / "files" / "md5" / md5[:2] / md5[2:]).unlink()  # never served again
    v1, v2 = Validator(net.clone("v1"), device="cpu"), Validator(net.clone("v2"), device="cpu")
    assert v1.run() == [] and v2.run() == []  # young: storage may be back soon, no vote
    assert not v1.ledger.git.out("ls-remote", "origin", f"refs/woolf/pr/{sub}/votes/*")
    time.sleep(2.2)
    v1.state.retry_at.clear()
    v2.state.retry_at.clear()
    assert v1.run() == []  # a reject vote naming the unavailable delta
    [verdict] = v2.run()  # the second agreeing reject vote settles it
    assert verdict.state == "rejected" and "delta object unavailable" in verdict.reason
    assert "over validators.vote_timeout 2 s" in verdict.reason
    assert LocalForge.for_ledger(net.clone("obs")).get(sub).state == "rejected"


def test_f11_names_claimed_against_the_id_share_one_turn_in_the_fair_queue(network):
    val, mallory, alice = network.clone("val"), network.clone("mallory"), network.clone("alice")
    flood = craft_prs(mallory, [{"raw": b"x" * 10, "meta_patch": {"contributor": f"sybil{i}"}} for i in range(6)])
    _seen(val)  # the validator receives the flood first
    good = craft_pr(alice, tensors=random_delta(alice, scale=0.001, seed=3), who="alice")
    order = [v.id for v in Validator(val, device="cpu").run()]
    assert sorted(order) == sorted(flood + [good]) and order.index(good) <= 1, order.index(good)


def test_f11_rejections_are_pushed_together_and_a_lost_race_loses_none(network):
    val, mallory = network.clone("val"), network.clone("mallory")
    junk = craft_prs(mallory, [{"raw": b"x" * 10}] * 3)
    a = Validator(val, device="cpu")
    a.state.batching = True  # as run() does on the git-native forge
    assert all(a.validate_one(j) is None for j in junk) and len(a.state.pending) == 3
    [first] = Validator(network.clone("val2"), device="cpu").run(ids=[junk[0]])  # decides one meanwhile
    assert first.id == junk[0]
    assert sorted(v.id for v in a.flush()) == sorted(junk[1:])  # the atomic push lost; one each
    prs = {p.id: p for p in LocalForge.for_ledger(network.clone("obs")).list()}
    assert all(prs[j].state == "rejected" and "safetensors" in prs[j].reason for j in junk), \
        [prs[j].reason for j in junk]


def test_a_flood_signed_by_its_own_key_beyond_twice_the_limit_counts_against_it(make_net):
    """Issue 28: a flood no one else can have sent (every PR signed by the contributor's key) is rated like a
    copy once it is over twice the open-PR limit; unsigned claims on the name still cost its owner nothing."""
    net = make_net(**{"policy.min_improvement": "-10", "queue.max_open_per_contributor": "1"})
    for hook in ("pre-receive", "post-receive"):  # a forge that runs no hook of ours: the validator's limit holds
        (net.hub / "hooks" / hook).unlink(missing_ok=True)
    val, bob, mallory = net.clone("val"), net.clone("bob"), net.clone("mallory")
    flood = craft_prs(bob, [{"raw": b"x" * 10, "who": "bob", "sign_key": key_for("bob")}] * 3)
    junk = craft_prs(mallory, [{"raw": b"x" * 10, "who": "carol", "sign_key": False}] * 3)  # unsigned claims
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    signed_over = [verdicts[i] for i in flood if "a flood signed by its contributor's key" in verdicts[i].reason]
    assert len(signed_over) == 2 and all("over the limit" in v.reason and v.scores is None for v in signed_over)
    assert all(verdicts[i].contributor is None for i in junk)  # carol has a key: unsigned claims are nobody's
    from woolf.ledger.verdicts import verdict_history

    history = verdict_history(val)
    rated = {r.id for r in history if r.rated and r.contributor == "bob"}
    assert {v.id for v in signed_over} <= rated
    assert all(not r.contributor for r in history if r.id in junk)  # nobody's


# Attacker text (F3, F1): a contributor name or a verdict trailer with git-log framing bytes (0x1E, 0x1F) or a
# newline is rejected, and every reader of the history goes on.


def test_f3_f1_bad_contributor_names_are_rejected_and_history_reads_on(network, cli):
    mallory, val = network.clone("mallory"), network.clone("val")
    names = ("mallory\x1eboom", "mallory\nWoolf-Vote: accept")
    bad = [craft_pr(mallory, tensors=delta(mallory, seed=i), meta_patch={"contributor": n}) for i, n in enumerate(names)]
    forged = craft_pr(mallory, tensors=delta(mallory, seed=5))
    head = mallory.git.rev_parse(f"{layout.PR_PREFIX}/{forged}/head")
    msg = format_message(f"woolf: rejected {forged}", {"Woolf-Verdict": "rejected", "Woolf-Submission": forged,
                         "Woolf-Reason": "split \x1e here \x1f and here", "Woolf-Contributor": "mallory\x1ex"})
    push_ref(mallory, mallory.git.commit_tree(f"{head}^{{tree}}", msg, [head]), f"{layout.PR_PREFIX}/{forged}/verdict")
    proc = cli("validate", "--all", "--json", "--device", "cpu", cwd=val.root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts = {v["id"]: v for v in json.loads(proc.stdout)}
    for sub_id in bad:
        assert not verdicts[sub_id]["accepted"] and "is not a contributor name" in verdicts[sub_id]["reason"]
        pr = LocalForge.for_ledger(val).get(sub_id)
        assert pr.state == "rejected" and pr.contributor is None
    observer = network.clone("observer")
    for cmd in (["leaderboard", "--json"], ["report", "--json"], ["pr", "list"], ["log"]):
        out = cli(*cmd, cwd=observer.root)
        assert out.returncode == 0, (cmd, out.stderr[-2000:])
