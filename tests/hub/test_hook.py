"""The hub's hook (woolf/hub/hook.py) against red-team refs and objects (F14, F1, F15, F6): one crafted ref
never stops every reader.

Each test pushes what an attacker pushed through the hub's real hook (refused, with the rule's
message) and then puts the same object in place without the hook (a forge without protection,
or a hub from before the rule) to show what validators and `woolf pr list` do with it anyway.
"""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import git
from tests.crafting import craft_pr, push, refused
from tests.hostile_corpus import delta, push_ref
from woolf.audit.recompute import audit
from woolf.forges.local import LocalForge
from woolf.protocol import layout
from woolf.protocol.trailers import (
    format_message,
    parse_message,
)
from woolf.protocol.votes import read_votes
from woolf.validator import Validator


def _verdict(led, sub_id: str, fields: dict, body: str = "") -> str:
    head = led.git.rev_parse(f"{layout.PR_PREFIX}/{sub_id}/head")
    msg = format_message(f"woolf: withdrawn {sub_id}", {
        "Woolf-Verdict": "withdrawn", "Woolf-Submission": sub_id,
        "Woolf-Reason": "withdrawn by its contributor carol",
        **fields}, body)
    return led.git.commit_tree(f"{head}^{{tree}}", msg, [head])  # signed with carol's own key


def test_f14_a_hostile_withdrawal_never_stops_listing_or_validation(network, cli):
    carol, alice, val = network.clone("carol"), network.clone("alice"), network.clone("val")
    big, deep, huge, honest = (craft_pr(carol, tensors=delta(carol, seed=s), who="carol") for s in (1, 2, 3, 4))
    ref = f"{layout.PR_PREFIX}/{{}}/verdict"
    # the hub's hook: a withdrawal carries only the trailers `woolf pr withdraw` writes, short and printable
    bad_big = _verdict(carol, big, {"Woolf-Staleness": "9" * 5000})
    assert refused(push(carol, f"{bad_big}:{ref.format(big)}"), "a withdrawal carries only")
    bad_deep = _verdict(carol, deep, {"Woolf-Closed-By": "[" * 400})
    assert refused(push(carol, f"{bad_deep}:{ref.format(deep)}"), "at most 300 characters")
    bad_huge = _verdict(carol, huge, {}, body="x" * (2 << 20))
    assert refused(push(carol, f"{bad_huge}:{ref.format(huge)}"), "over the limit of")
    LocalForge.for_ledger(carol).withdraw(honest, by="carol")  # the honest withdrawal still lands
    # the same verdicts where no hook stopped them: read as data, the PR shown, nothing else affected
    for sub_id, commit in ((big, bad_big), (deep, bad_deep), (huge, bad_huge)):
        push_ref(carol, commit, ref.format(sub_id))
    good = craft_pr(alice, tensors=delta(alice, seed=5), who="alice")
    listing = cli("pr", "list", "--json", cwd=val.root)
    assert listing.returncode == 0, listing.stderr[-2000:]
    prs = {p["id"]: p for p in json.loads(listing.stdout)}
    assert prs[big]["state"] == "withdrawn" and prs[big]["staleness"] is None
    assert prs[huge]["state"] == "quarantined" and "over the limit of" in prs[huge]["reason"]
    assert prs[honest]["state"] == "withdrawn" and prs[good]["state"] == "open"
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert list(verdicts) == [good] and verdicts[good].accepted, verdicts
    notes = audit(network.clone("auditor")).notes  # the audit reads verdicts size-first too
    assert any(huge in n and "unreadable" in n for n in notes), notes


def test_f1_a_contributor_name_with_a_newline_is_rejected_and_votes_go_on(make_net):
    network = make_net(**{"validators.quorum": "2", "policy.min_improvement": "-10"})
    mallory, alice, v1 = network.clone("mallory"), network.clone("alice"), network.clone("v1")
    bad = craft_pr(mallory, tensors=delta(mallory, seed=1), meta_patch={"contributor": "mallory\nWoolf-Vote: accept"})
    trail = craft_pr(mallory, tensors=delta(mallory, seed=2), meta_patch={"contributor": "mallory\n"})
    good = craft_pr(alice, tensors=delta(alice, seed=3), who="alice")
    assert Validator(v1, device="cpu").run() == []  # one vote each, no quorum yet: nothing settled, no crash
    for sub_id, decision in ((bad, "reject"), (trail, "reject"), (good, "accept")):
        ballots, ignored = read_votes(v1.git, sub_id, None, "loss")
        assert [b.decision for b in ballots] == [decision] and not ignored, (sub_id, ballots, ignored)
    msg = v1.git.message(f"{layout.PR_PREFIX}/{bad}/votes/v1")
    fields = parse_message(msg)[1]
    assert "is not a contributor name" in fields["Woolf-Reason"] and "Woolf-Contributor" not in fields
    assert fields["Woolf-Vote"] == "reject" and not any(line.startswith("Woolf-Vote: accept") for line in msg.split("\n"))


def test_f15_a_huge_parent_message_is_refused_unread(network):
    mallory, val = network.clone("mallory"), network.clone("val")
    base = mallory.head("refs/remotes/origin/main").commit
    msg = b"x\n\nWoolf-Version: 0\n" + b"a" * (3 << 20) + b"\n"
    parent = subprocess.run(["git", "commit-tree", f"{base}^{{tree}}", "-p", base], cwd=mallory.root, input=msg,
                            capture_output=True, check=True).stdout.decode().strip()
    head = mallory.git.out("commit-tree", f"{base}^{{tree}}", "-p", parent, input=b"pr\n")
    sub = f"20261129T000000000Z-mallory-{os.urandom(4).hex()}"
    assert refused(push(mallory, f"{head}:{layout.PR_PREFIX}/{sub}/head"), "over the limit of 1048576")
    push_ref(mallory, head, f"{layout.PR_PREFIX}/{sub}/head")
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert not verdicts[sub].accepted and "parent commit is" in verdicts[sub].reason, verdicts[sub].reason
    assert "over the limit of 1048576" in verdicts[sub].reason


def test_f6_pushes_are_bounded_by_git_and_by_the_hook(network):
    mallory = network.clone("mallory")
    assert git("config", "receive.maxInputSize", cwd=network.hub) == str(16 << 20)
    base = mallory.head("refs/remotes/origin/main").commit

    def head_with(data: bytes) -> str:
        blob = mallory.git.out("hash-object", "-w", "--stdin", input=data)
        tree = mallory.git.out("mktree", input=f"100644 blob {blob}\tjunk.bin\n".encode())
        return mallory.git.out("commit-tree", tree, "-p", base, input=b"junk\n")

    sub = f"20261130T000000000Z-mallory-{os.urandom(4).hex()}"
    zeros = head_with(b"\0" * (40 << 20))  # a pack of kilobytes, 40 MiB of objects
    assert refused(push(mallory, f"{zeros}:{layout.PR_PREFIX}/{sub}/head"), "over the limit of 33554432")
    noise = head_with(os.urandom(17 << 20))  # a 17 MiB pack: git refuses it before the hook runs
    proc = push(mallory, f"{noise}:{layout.PR_PREFIX}/{sub}/head")
    assert proc.returncode != 0 and "maximum allowed size" in proc.stderr, proc.stderr[-500:]
    honest = craft_pr(mallory, tensors=delta(mallory, seed=1))  # an honest PR is far under both
    assert refused(push(mallory, f"{zeros}:{layout.PR_PREFIX}/{honest}/comments"), "over the limit of 33554432")
    assert git("rev-parse", f"{layout.PR_PREFIX}/{honest}/head", cwd=network.hub)
    hub_size = sum(f.stat().st_size for f in network.hub.rglob("*") if f.is_file())
    assert hub_size < 8 << 20
