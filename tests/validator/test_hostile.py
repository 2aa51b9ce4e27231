"""One hostile PR never stops the queue: the hand-built corpus mixed with honest PRs, queue order, data loss."""

from __future__ import annotations

import json

from tests.crafting import craft_pr, next_second
from tests.hostile_corpus import delta, new_id, push_ref, storage_object
from woolf.audit.recompute import audit
from woolf.forges.local import LocalForge
from woolf.protocol import layout
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
