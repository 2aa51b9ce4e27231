"""Which ref updates one push may make: woolf/protocol/rules/push.py `check_push`, unit-tested.

The "hub" is a plain `git init` repository whose main is a genesis commit with ledger/woolf.toml
and ledger/allowed_signers, built by hand with git plumbing (hash-object, mktree, commit-tree,
update-ref; signed with `git -c gpg.format=ssh -c user.signingkey=KEY commit-tree -S`). A push is
the list of (old, new, ref) updates the pre-receive hook reads; its objects are already in the
repository, unreferenced, as in git's quarantine. No `woolf init`, DVC or hub hook. Every byte
of a ref, commit and PR is what an attacker who read the code could write.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import woolf.protocol.rules.push as push_rules
from tests.conftest import key_for
from tests.gitobjects import Templates, commit_tree, copied, tree_with
from tests.gitobjects import git_out as _git
from tests.gitobjects import pub as _pub
from tests.gitobjects import tree_of as _tree
from woolf.git.repo import COMMIT_MAX_BYTES, Git
from woolf.protocol import layout
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides, render_config
from woolf.protocol.rules.push import (
    PUSH_MAX_BYTES,
    PUSH_MAX_OBJECTS,
    WITHDRAWAL_MAX_BYTES,
    ZERO,
    check_push,
)
from woolf.protocol.signers import SIGNERS_PATH, Signers, signer_line
from woolf.protocol.tasks import TaskRecord, task_ref
from woolf.protocol.trailers import format_message

pytestmark = pytest.mark.unit

NOW = int(time.time())
ALICE_PR = "20260101T000000000Z-alice-0123abcd"
MALLORY_PR = "20260101T000000000Z-mallory-00ff00ff"
NAMESPACES = ("this hub accepts only main, refs/woolf/pr/<id>/{head,verdict,comments,votes/<name>,"
              "challenge/<name>,answer} and refs/woolf/task/<id>")


def _commit(repo: Path, tree: str, message: str, parents=(), key: str | None = None, when: int | None = None) -> str:
    return commit_tree(repo, tree, message, parents, key_for(key) if key else None, when)


def _tree_with(repo: Path, commit: str, path: str, data: bytes) -> str:
    return tree_with(repo, commit, {path: data})


# work: maintainer and validator; val, val2: validators; alice, bob: contributors; mallory: no key listed
SIGNERS = Signers.parse("\n".join([
    signer_line("work", _pub("work"), ["maintainer", "validator"]), signer_line("val", _pub("val"), ["validator"]),
    signer_line("val2", _pub("val2"), ["validator"]), signer_line("alice", _pub("alice")),
    signer_line("bob", _pub("bob"))])).render()


class Hub:
    """A repository whose main is a signed genesis; builders for the commits a push carries."""

    def __init__(self, repo: Path, signed: bool = True, **overrides):
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        self.repo, self.git = repo, Git(repo)
        cfg = apply_overrides(LedgerConfig(), overrides) if overrides else LedgerConfig()
        self.files = {layout.CONFIG: render_config(cfg).encode(), layout.POINTER: b"pointer 0\n"}
        if signed:
            self.files[SIGNERS_PATH] = SIGNERS.encode()
        self.tree = _tree(repo, self.files)
        self.genesis = _commit(repo, self.tree, format_message("woolf: version 0", {"Woolf-Version": 0}),
                               key="work" if signed else None)
        self.set(layout.MAIN, self.genesis)
        self.heads: dict[str, str] = {}  # sub id -> its PR head, made once here and so in every copy
        self.heads = {sub_id: self.pr(sub_id, opened=False) for sub_id in (ALICE_PR, MALLORY_PR)}

    def set(self, ref: str, sha: str) -> None:
        _git(self.repo, "update-ref", ref, sha)

    def push(self, *updates: tuple[str, str, str]) -> list[str]:
        return check_push(self.git, list(updates))

    def pr(self, sub_id: str = ALICE_PR, opened: bool = True) -> str:
        """A PR head on main's genesis (an unreferenced commit); ``opened``: its head ref is on the hub."""
        head = self.heads.get(sub_id)
        if head is None:
            _, ptr, meta = layout.submission_paths(sub_id)
            tree = _tree(self.repo, {**self.files, ptr: b"outs: []\n", meta: f'{{"id": "{sub_id}"}}'.encode()})
            head = _commit(self.repo, tree, f"submission {sub_id}\n", [self.genesis])
        if opened:
            self.set(f"{layout.PR_PREFIX}/{sub_id}/head", head)
        return head

    def verdict(self, head: str, state: str = "rejected", sub_id: str = ALICE_PR, key: str | None = "val",
                parents=None, body: str = "", when: int | None = None, **fields) -> str:
        message = format_message(f"woolf: {state} {sub_id}", {
            "Woolf-Verdict": state, "Woolf-Submission": sub_id, "Woolf-Reason": "no improvement", **fields}, body)
        return _commit(self.repo, self.tree, message, [head] if parents is None else parents, key=key, when=when)

    def version(self, parent: str, number: int, head: str | None = None, key: str | None = "val",
                sub_id: str = ALICE_PR, **fields) -> str:
        """A merge version of ``head`` (changing only the weights pointer) or, without one, a change
        (adding a benchmark file), on ``parent``'s tree."""
        if head is None:
            path, kind = f"ledger/benchmark/more{number}.txt", {"Woolf-Change": "config"}
        else:
            path, kind = layout.POINTER, {"Woolf-Submission": sub_id}
        message = format_message(f"woolf: version {number}", {"Woolf-Version": number, **kind, **fields})
        tree = _tree_with(self.repo, parent, path, f"version {number}\n".encode())
        return _commit(self.repo, tree, message, [parent] + ([head] if head else []), key=key)

    def vote(self, parent: str, voter: str = "val", key: str | None = "val", sub_id: str = ALICE_PR,
             when: int | None = None, **fields) -> str:
        message = format_message("woolf: vote", {"Woolf-Vote": "reject", "Woolf-Submission": sub_id,
                                                 "Woolf-Main": self.genesis, "Woolf-Voter": voter, **fields})
        return _commit(self.repo, self.tree, message, [parent], key=key, when=when)

    def copy(self, dest: Path) -> Hub:
        """This repository copied to ``dest`` (one genesis built per module, not per test)."""
        twin = copied(self, dest)
        twin.git, twin.heads = Git(dest), dict(self.heads)
        return twin


@pytest.fixture(scope="module")
def _templates(tmp_path_factory) -> Templates:
    return Templates(tmp_path_factory.mktemp("push-rules"), Hub)


@pytest.fixture
def make_hub(tmp_path, _templates):
    """make_hub(signed=True, **config overrides): a fresh copy of that hub for this test."""
    return lambda signed=True, **overrides: _templates.copy_for(tmp_path, signed, **overrides)


@pytest.fixture
def hub(make_hub) -> Hub:
    return make_hub()


def _ref(sub_id: str, kind: str) -> str:
    return f"{layout.PR_PREFIX}/{sub_id}/{kind}"


# -- namespaces --------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", [
    "refs/heads/evil", "refs/heads/main2", "refs/tags/v1", "refs/notes/commits", "refs/remotes/origin/main",
    f"refs/woolf/pr/{ALICE_PR}/head/x", f"refs/woolf/pr/{ALICE_PR}/other", f"refs/woolf/pr/{ALICE_PR}/votes/a/b",
    f"refs/woolf/prx/{ALICE_PR}/head", "refs/woolf/task", f"refs/heads/woolf/{ALICE_PR}",  # a local forge
    "refs/woolf/pr/receipts",  # the hub's own receipt log (woolf/hub/receipts.py)
])
def test_refs_outside_the_ledgers_namespaces_are_refused(hub, ref):
    assert hub.push((ZERO, hub.pr(opened=False), ref)) == [f"{ref}: {NAMESPACES}"]


def test_a_github_ledger_takes_pr_branches_once(make_hub):
    hub = make_hub(**{"forge.kind": "github", "forge.repo": "owner/ledger"})
    branch = f"refs/heads/woolf/{ALICE_PR}"
    head = hub.pr(opened=False)
    assert hub.push((ZERO, head, branch)) == []
    once = "a PR branch is created once and never moved"
    assert hub.push((head, hub.pr(MALLORY_PR, opened=False), branch)) == [f"{branch}: {once}"]
    assert hub.push((head, ZERO, branch)) == [f"{branch}: {once}"]
    bad = "refs/heads/woolf/not-an-id"
    assert hub.push((ZERO, head, bad)) == [f"{bad}: {NAMESPACES}"]


def test_an_unreadable_config_on_main_counts_as_a_local_forge(make_hub):
    hub = make_hub()
    broken = _commit(hub.repo, _tree_with(hub.repo, hub.genesis, layout.CONFIG, b'[forge]\nkind = "github"\n[[['),
                     "woolf: version 1\n", [hub.genesis])
    hub.set(layout.MAIN, broken)
    branch = f"refs/heads/woolf/{ALICE_PR}"
    assert hub.push((ZERO, hub.pr(opened=False), branch)) == [f"{branch}: {NAMESPACES}"]


# -- main --------------------------------------------------------------------------------------


def test_main_is_never_created_or_deleted(hub):
    v1 = hub.version(hub.genesis, 1, key="work")
    assert hub.push((ZERO, v1, layout.MAIN)) == ["refs/heads/main: main is never created or deleted by a push"]
    assert hub.push((hub.genesis, ZERO, layout.MAIN)) == ["refs/heads/main: main is never created or deleted by a push"]


def test_main_moves_only_forward_along_its_first_parents(hub):
    v1 = hub.version(hub.genesis, 1, key="work")
    hub.set(layout.MAIN, v1)
    refused = ["refs/heads/main: main only moves forward along its first-parent chain (a force-push or rewind is refused)"]
    assert hub.push((v1, hub.genesis, layout.MAIN)) == refused  # a rewind
    rewrite = hub.version(hub.genesis, 1, key="work", **{"Woolf-Reason": "rewritten"})
    assert rewrite != v1 and hub.push((v1, rewrite, layout.MAIN)) == refused
    # old main reached only through a second parent: a history of the attacker's own, merged with main
    root = _commit(hub.repo, hub.tree, format_message("woolf: version 0", {"Woolf-Version": 0}), key="mallory")
    graft = _commit(hub.repo, hub.tree, format_message("woolf: version 2", {
        "Woolf-Version": 2, "Woolf-Submission": ALICE_PR}), [root, v1], key="val")
    assert hub.push((v1, graft, layout.MAIN)) == refused
    blob = _git(hub.repo, "hash-object", "-w", "--stdin", input=b"not a commit")
    assert hub.push((v1, blob, layout.MAIN)) == refused


def test_main_cannot_be_replaced_by_a_root_that_claims_a_parent_in_an_extra_header(make_hub):
    """A commit whose only `parent` line comes after the committer line is a root to git (the line
    is an extra header, and fsck passes it); the rules must read the parents git reads, so such a
    commit never passes as main moving forward (it would replace the whole history)."""
    hub = make_hub(signed=False)
    v1 = hub.version(hub.genesis, 1, key=None)
    hub.set(layout.MAIN, v1)
    tree = _tree_with(hub.repo, v1, "ledger/benchmark/more2.txt", b"version 2\n")
    message = format_message("woolf: version 2", {"Woolf-Version": 2, "Woolf-Change": "config"})
    raw = (f"tree {tree}\nauthor t <t@t> {NOW} +0000\ncommitter t <t@t> {NOW} +0000\n"
           f"parent {v1}\n\n{message}").encode()
    root = _git(hub.repo, "hash-object", "-w", "-t", "commit", "--stdin", input=raw)
    assert _git(hub.repo, "rev-list", "--parents", "-n1", root) == root  # git: no parent at all
    refused = ["refs/heads/main: main only moves forward along its first-parent chain (a force-push or rewind is refused)"]
    assert hub.push((v1, root, layout.MAIN)) == refused


def test_main_takes_a_maintainers_change_and_a_validators_merge_with_its_verdict(hub):
    v1 = hub.version(hub.genesis, 1, key="work")
    assert hub.push((hub.genesis, v1, layout.MAIN)) == []
    head = hub.pr()
    v2 = hub.version(v1, 2, head, key="val")
    assert hub.push((hub.genesis, v2, layout.MAIN), (ZERO, v2, _ref(ALICE_PR, "verdict"))) == []


def test_each_new_main_commit_is_a_consecutive_version_signed_by_its_role(hub):
    g = hub.genesis
    unsigned = hub.version(g, 1, key=None)
    assert hub.push((g, unsigned, layout.MAIN)) == [
        f"refs/heads/main: {unsigned[:12]}: no signature (needs a maintainer key)"]
    by_val = hub.version(g, 1, key="val")
    assert hub.push((g, by_val, layout.MAIN)) == [
        f"refs/heads/main: {by_val[:12]}: signed by val, who is not a maintainer in ledger/allowed_signers"]
    merge_by_alice = hub.version(g, 1, hub.pr(), key="alice")
    assert hub.push((g, merge_by_alice, layout.MAIN)) == [
        f"refs/heads/main: {merge_by_alice[:12]}: signed by alice, who is not a validator in ledger/allowed_signers"]
    skip = hub.version(g, 2, key="work")
    assert hub.push((g, skip, layout.MAIN)) == [
        f"refs/heads/main: {skip[:12]}: numbered 2, expected 1 (versions must be consecutive)"]
    v1 = hub.version(g, 1, key="work")
    bad_second = hub.version(v1, 2, hub.pr(MALLORY_PR), key="mallory", sub_id=MALLORY_PR)
    assert hub.push((g, bad_second, layout.MAIN)) == [
        f"refs/heads/main: {bad_second[:12]}: a good signature by a key not in allowed_signers (needs a validator key)"]
    plain = _commit(hub.repo, hub.tree, "a plain commit\n", [g])
    assert hub.push((g, plain, layout.MAIN)) == [
        f"refs/heads/main: {plain[:12]}: numbered None, expected 1 (versions must be consecutive)",
        f"refs/heads/main: {plain[:12]}: not a version commit (no Woolf-Version trailer, or neither a merge nor a change)"]


def test_an_oversized_commit_on_main_is_a_problem_not_an_exception(hub):
    big = _commit(hub.repo, hub.tree, format_message("woolf: version 1", {"Woolf-Version": 1, "Woolf-Change": "config"},
                                                     "x" * COMMIT_MAX_BYTES), [hub.genesis], key="work")
    errors = hub.push((hub.genesis, big, layout.MAIN))
    assert len(errors) == 1 and errors[0].startswith("refs/heads/main: ")


# -- PR heads and comments ---------------------------------------------------------------------


@pytest.mark.parametrize("sub_id", ["..", "20260101T000000000Z-Alice-0123abcd", "alice",
                                    "20260101T000000000Z-alice-0123abcdX", "20260101T00000000Z-alice-0123abcd"])
@pytest.mark.parametrize("kind", ["head", "verdict", "comments"])
def test_pr_refs_name_a_submission_id(hub, sub_id, kind):
    ref = _ref(sub_id, kind)
    assert hub.push((ZERO, hub.pr(opened=False), ref)) == [f"{ref}: {sub_id!r} is not a submission id"]


def test_a_pr_head_is_created_once(hub):
    ref = _ref(ALICE_PR, "head")
    head = hub.pr(opened=False)
    assert hub.push((ZERO, head, ref)) == []
    other = hub.pr(MALLORY_PR, opened=False)
    assert hub.push((head, other, ref)) == [f"{ref}: a PR head is created once and never moved"]
    assert hub.push((head, ZERO, ref)) == [f"{ref}: pull-request refs are never deleted"]


def test_a_pr_head_that_is_no_commit_is_refused(hub):
    """Issue 25: a blob or tree as a PR head stayed quarantined forever; the hub refuses it."""
    ref = _ref(ALICE_PR, "head")
    blob = _git(hub.repo, "hash-object", "-w", "--stdin", input=b"junk")
    assert hub.push((ZERO, blob, ref)) == [f"{ref}: a PR head is a commit (this is a blob)"]
    assert hub.push((ZERO, hub.tree, ref)) == [f"{ref}: a PR head is a commit (this is a tree)"]


def test_comments_are_comment_commits_on_the_head_and_move_only_forward(hub):
    ref, head = _ref(ALICE_PR, "comments"), hub.pr()
    tree = _git(hub.repo, "rev-parse", f"{head}^{{tree}}")
    first = _commit(hub.repo, tree, "comment 1\n", [head])
    second = _commit(hub.repo, tree, "comment 2\n", [first])
    assert hub.push((ZERO, first, ref)) == []
    assert hub.push((first, second, ref)) == []
    hub.set(ref, second)
    assert hub.push((second, first, ref)) == [f"{ref}: comments only move forward"]
    assert hub.push((second, _commit(hub.repo, tree, "rewritten\n", [first]), ref)) == [
        f"{ref}: comments only move forward"]
    assert hub.push((second, ZERO, ref)) == [f"{ref}: pull-request refs are never deleted"]
    # issue 25: arbitrary content on the comments ref is refused
    blob = _git(hub.repo, "hash-object", "-w", "--stdin", input=b"anything")
    assert hub.push((second, blob, ref)) == [f"{ref}: comments only move forward"]
    cargo = _commit(hub.repo, hub.tree, "files of its own\n", [second])
    assert hub.push((second, cargo, ref)) == [
        f"{ref}: a comment commit has one parent and the PR head's tree (no files of its own)"]
    big = _commit(hub.repo, tree, "x" * 20000 + "\n", [second])
    assert hub.push((second, big, ref)) == [f"{ref}: a comment is at most 16384 bytes"]
    elsewhere = _commit(hub.repo, tree, "on genesis\n", [hub.genesis])
    assert hub.push((ZERO, elsewhere, _ref(MALLORY_PR, "comments"))) == [
        f"{_ref(MALLORY_PR, 'comments')}: comments on a pull request that does not exist"]


def _ids(n: int, who: str = "m") -> list[str]:
    return [f"20260101T000000{i % 1000:03d}Z-{who}{'' if who != 'm' else i}-{i:08x}" for i in range(n)]


def test_one_push_opens_at_most_push_max_new_prs(hub):
    """Issue 25, breach 5: one push of 10,001 PR refs was accepted; now one push opens at most 16."""
    from woolf.protocol.rules.flood import PUSH_MAX_NEW_PRS

    head = hub.pr(opened=False)
    many = [(ZERO, head, _ref(i, "head")) for i in _ids(PUSH_MAX_NEW_PRS + 1)]
    assert hub.push(*many) == [f"this push opens {PUSH_MAX_NEW_PRS + 1} PRs, over the limit of {PUSH_MAX_NEW_PRS} per push"]
    assert hub.push(*many[:PUSH_MAX_NEW_PRS]) == []


def test_open_prs_per_contributor_and_keyless_are_bounded(make_hub, monkeypatch):
    import woolf.protocol.rules.flood as flood

    hub = make_hub(**{"queue.max_open_per_contributor": "2"})
    head = hub.pr(opened=False)
    for sub_id in _ids(2, "eve"):
        hub.set(_ref(sub_id, "head"), head)
    third = _ids(3, "eve")[2]
    assert hub.push((ZERO, head, _ref(third, "head"))) == [
        "eve has 2 open PRs on this hub; queue.max_open_per_contributor is 2: wait for verdicts, or an unsigned "
        "name is anyone's to fill, so sign with a key listed in ledger/allowed_signers (its PRs count apart), "
        "or submit under another name"]  # issue 37: eve has no key, she cannot withdraw
    hub.set(_ref(_ids(1, "eve")[0], "verdict"), hub.verdict(head, sub_id=_ids(1, "eve")[0]))  # one closes
    assert hub.push((ZERO, head, _ref(third, "head"))) == []
    monkeypatch.setattr(flood, "OPEN_KEYLESS_MAX", 3)
    hub.set(_ref(third, "head"), head)
    # unsigned PRs naming alice (who has a key) are nobody's: they fill the keyless bucket, not her quota
    flood_ids = _ids(2, "alice")
    assert hub.push((ZERO, head, _ref(flood_ids[0], "head"))) == []
    hub.set(_ref(flood_ids[0], "head"), head)
    assert hub.push((ZERO, head, _ref(flood_ids[1], "head"))) == [
        "3 PRs of contributors without a key in allowed_signers (or unsigned) are open on this hub: wait for "
        "verdicts, or sign with a listed key"]
    signed = _commit(hub.repo, _git(hub.repo, "rev-parse", f"{head}^{{tree}}"), "alice's\n", [hub.genesis], key="alice")
    assert hub.push((ZERO, signed, _ref(flood_ids[1], "head"))) == []  # alice's own signed PR still lands


# -- verdicts ----------------------------------------------------------------------------------


def test_a_verdict_is_created_once_for_an_existing_pr(hub):
    ref = _ref(ALICE_PR, "verdict")
    head = hub.pr(opened=False)
    verdict = hub.verdict(head)
    assert hub.push((ZERO, verdict, ref)) == [f"{ref}: a verdict for a pull request that does not exist"]
    assert hub.push((ZERO, head, _ref(ALICE_PR, "head")), (ZERO, verdict, ref)) == []  # opened in the same push
    hub.set(_ref(ALICE_PR, "head"), head)
    assert hub.push((ZERO, verdict, ref)) == []
    assert hub.push((verdict, hub.verdict(head, key="work"), ref)) == [
        f"{ref}: a PR verdict is created once and never moved"]


@pytest.mark.parametrize("fields", [
    {"Woolf-Verdict": "accepted"}, {"Woolf-Verdict": "merged"}, {"Woolf-Verdict": "Rejected"},
    {"Woolf-Submission": MALLORY_PR}, {"Woolf-Submission": ALICE_PR + " "}])
def test_a_verdict_carries_its_state_and_this_submission(hub, fields):
    ref = _ref(ALICE_PR, "verdict")
    assert hub.push((ZERO, hub.verdict(hub.pr(), **fields), ref)) == [
        f"{ref}: a verdict commit carries Woolf-Verdict (rejected|withdrawn|expired) and this Woolf-Submission"]
    bare = _commit(hub.repo, hub.tree, "rejected, trust me\n", [hub.pr()])
    assert hub.push((ZERO, bare, ref)) == hub.push((ZERO, hub.verdict(hub.pr(), **fields), ref))


def test_a_verdicts_one_parent_is_the_head(hub):
    ref = _ref(ALICE_PR, "verdict")
    head = hub.pr()
    for parents in ([hub.genesis], [head, hub.genesis], [hub.pr(MALLORY_PR)], []):
        assert hub.push((ZERO, hub.verdict(head, parents=parents), ref)) == [
            f"{ref}: a verdict commit's one parent is the PR's head"]


@pytest.mark.parametrize("kind", ["blob", "tree"])
def test_a_verdict_that_is_no_commit_is_a_problem_not_an_exception(hub, kind):
    hub.pr()
    target = hub.tree if kind == "tree" else _git(hub.repo, "hash-object", "-w", "--stdin", input=b"rejected")
    ref = _ref(ALICE_PR, "verdict")
    errors = hub.push((ZERO, target, ref))
    assert len(errors) == 1 and errors[0].startswith(f"{ref}: ")


@pytest.mark.parametrize(("key", "problem"), [
    ("val", None), ("work", None),
    (None, "no signature (needs a validator key)"),
    ("bob", "signed by bob, who is not a validator in ledger/allowed_signers"),
    ("alice", "signed by alice, who is not a validator in ledger/allowed_signers"),  # her own PR
    ("mallory", "a good signature by a key not in allowed_signers (needs a validator key)"),
])
def test_a_rejection_is_signed_by_a_validator(hub, key, problem):
    ref = _ref(ALICE_PR, "verdict")
    assert hub.push((ZERO, hub.verdict(hub.pr(), key=key), ref)) == ([f"{ref}: {problem}"] if problem else [])


@pytest.mark.parametrize(("sub_id", "key", "problem"), [
    (ALICE_PR, "alice", None), (ALICE_PR, "val", None),
    (ALICE_PR, "bob", "signed by bob, who is not a validator in ledger/allowed_signers; "
                      "a withdrawal may also be signed by alice's own key"),
    (ALICE_PR, None, "no signature (needs a validator key); a withdrawal may also be signed by alice's own key"),
    (MALLORY_PR, "mallory", "a good signature by a key not in allowed_signers (needs a validator key); "
                            "a withdrawal may also be signed by mallory's own key"),
])
def test_a_withdrawal_is_signed_by_a_validator_or_the_prs_contributor(hub, sub_id, key, problem):
    ref = _ref(sub_id, "verdict")
    verdict = hub.verdict(hub.pr(sub_id), "withdrawn", sub_id=sub_id, key=key, **{"Woolf-Closed-By": "alice"})
    assert hub.push((ZERO, verdict, ref)) == ([f"{ref}: {problem}"] if problem else [])


@pytest.mark.parametrize(("fields", "body", "problem"), [
    ({"Woolf-Staleness": "9" * 5000, "Woolf-Votes": "[]"}, "",
     "a withdrawal carries only Woolf-Verdict, Woolf-Submission, Woolf-Reason, Woolf-Closed-By "
     "(not Woolf-Staleness, Woolf-Votes)"),
    ({}, "x" * WITHDRAWAL_MAX_BYTES, f"a withdrawal's message is at most {WITHDRAWAL_MAX_BYTES} bytes"),
    ({"Woolf-Reason": "r" * 301}, "", "a withdrawal's trailers are one printable line of at most 300 characters each"),
    ({"Woolf-Reason": "fine\x1b[2J"}, "", "a withdrawal's trailers are one printable line of at most 300 characters each"),
    ({"Woolf-Reason": "fine\u202eevil"}, "", "a withdrawal's trailers are one printable line of at most 300 characters each"),
    ({"Woolf-Closed-By": "Alice"}, "", "Woolf-Closed-By names a contributor (lower-case letters, digits, . _ -)"),
    ({"Woolf-Closed-By": "alice bob"}, "", "Woolf-Closed-By names a contributor (lower-case letters, digits, . _ -)"),
])
def test_a_withdrawal_carries_only_short_printable_trailers(hub, fields, body, problem):
    ref = _ref(ALICE_PR, "verdict")
    verdict = hub.verdict(hub.pr(), "withdrawn", key="alice", body=body, **fields)
    assert hub.push((ZERO, verdict, ref)) == [f"{ref}: {problem}"]


def test_a_merged_verdict_is_the_version_commit_landing_with_main(hub):
    ref = _ref(ALICE_PR, "verdict")
    head = hub.pr()
    v1 = hub.version(hub.genesis, 1, head)
    assert hub.push((ZERO, v1, ref)) == [f"{ref}: a merged verdict lands together with main (one atomic push)"]
    not_this = "a merged verdict must be the version commit that merged this PR's head"
    other = hub.version(hub.genesis, 1, hub.pr(MALLORY_PR))  # merges another PR's head, naming this one
    assert hub.push((hub.genesis, other, layout.MAIN), (ZERO, other, ref)) == [f"{ref}: {not_this}"]
    mislabelled = hub.version(hub.genesis, 1, head, sub_id=MALLORY_PR)
    assert hub.push((hub.genesis, mislabelled, layout.MAIN), (ZERO, mislabelled, ref)) == [f"{ref}: {not_this}"]


class TestExpiry:
    """`expired` verdicts name every latest vote on the PR, of k validators that failed to agree, dated
    vote_timeout after the first vote, near the hub's clock (issue 25, breach 1)."""

    @pytest.fixture(autouse=True)
    def _hub_clock(self, monkeypatch):
        monkeypatch.setattr(push_rules, "time", SimpleNamespace(time=lambda: float(NOW)))

    @pytest.fixture
    def qhub(self, make_hub):
        return make_hub(**{"validators.quorum": "2"})

    def _split(self, hub, when=NOW - 3600):
        """val rejects, val2 accepts: two validators who failed to agree, their votes on the hub."""
        head = hub.pr()
        no = hub.vote(head, when=when)
        yes = hub.vote(head, "val2", key="val2", when=when, **{"Woolf-Vote": "accept",
                                                               "Woolf-Candidate-Sha256": "c" * 64})
        hub.set(_ref(ALICE_PR, "votes/val"), no)
        hub.set(_ref(ALICE_PR, "votes/val2"), yes)
        return head, no, yes

    def test_an_expiry_after_the_vote_timeout_is_accepted(self, qhub):
        head, no, yes = self._split(qhub)
        verdict = qhub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": [no, yes]})
        assert qhub.push((ZERO, verdict, _ref(ALICE_PR, "verdict"))) == []

    def test_a_back_dated_vote_is_refused(self, qhub):
        """Breach 1: a vote committed 2 hours in the past (to expire the PR at once) never lands."""
        ref = _ref(ALICE_PR, "votes/val")
        back = qhub.vote(qhub.pr(), when=NOW - 7200)
        assert qhub.push((ZERO, back, ref)) == [
            f"{ref}: its commit time is -7200 s off the hub's clock (at most 300 s): a vote is pushed when it is made"]
        assert qhub.push((ZERO, qhub.vote(qhub.pr(), when=NOW - 5), ref)) == []

    def test_one_validator_below_the_quorum_cannot_expire_a_pr(self, qhub):
        """Breach 1: under quorum 2, one validator's reject vote and its `expired` verdict are refused."""
        ref, head = _ref(ALICE_PR, "verdict"), qhub.pr()
        alone = qhub.vote(head, when=NOW - 7200)
        qhub.set(_ref(ALICE_PR, "votes/val"), alone)
        verdict = qhub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": [alone]})
        assert qhub.push((ZERO, verdict, ref)) == [
            f"{ref}: an expiry names votes of 1 validator(s) (val); it needs 2 validators whose votes failed "
            "to agree (fewer could forge it alone)"]

    def test_an_expiry_names_every_latest_vote_and_votes_that_do_not_agree(self, qhub):
        ref = _ref(ALICE_PR, "verdict")
        head, no, yes = self._split(qhub)
        verdict = qhub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": [no]})
        assert qhub.push((ZERO, verdict, ref)) == [
            f"{ref}: an expiry names every validator's latest vote on the PR; it leaves out {yes[:12]}"]
        no2 = qhub.vote(head, "val2", key="val2", when=NOW - 3600)
        qhub.set(_ref(ALICE_PR, "votes/val2"), no2)
        agreed = qhub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": [no, no2]})
        assert qhub.push((ZERO, agreed, ref)) == [
            f"{ref}: the votes it names agree on an outcome: the PR is settled by them, not expired"]

    def test_nothing_expires_under_a_quorum_of_one(self, hub):
        ref, head = _ref(ALICE_PR, "verdict"), hub.pr()
        vote = hub.vote(head, when=NOW - 3600)
        verdict = hub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": [vote]})
        assert hub.push((ZERO, verdict, ref)) == [
            f"{ref}: a ledger with validators.quorum = 1 settles every PR by one verdict; nothing expires"]

    def test_an_expiry_names_votes_of_this_pr(self, qhub):
        ref, head = _ref(ALICE_PR, "verdict"), qhub.pr()
        assert qhub.push((ZERO, qhub.verdict(head, "expired", when=NOW), ref)) == [
            f"{ref}: an expiry names the votes that did not reach quorum (Woolf-Votes)"]
        elsewhere = qhub.vote(qhub.pr(MALLORY_PR), sub_id=MALLORY_PR, when=NOW - 9999)
        verdict = qhub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": [elsewhere]})
        assert qhub.push((ZERO, verdict, ref)) == [f"{ref}: an expiry names commits that are no votes on this PR"]
        verdict = qhub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": "[\"HEAD\"]"})
        assert qhub.push((ZERO, verdict, ref)) == [f"{ref}: Woolf-Votes must be a list of at most 64 commit ids"]

    def test_an_expiry_comes_vote_timeout_after_the_first_vote_by_the_hubs_clock(self, qhub):
        ref = _ref(ALICE_PR, "verdict")
        head, no, yes = self._split(qhub, when=NOW - 10)
        early = qhub.verdict(head, "expired", when=NOW, **{"Woolf-Votes": [no, yes]})
        assert qhub.push((ZERO, early, ref)) == [
            f"{ref}: expired 10 s after the first vote; validators.vote_timeout is 3600 s"]
        backdated = qhub.verdict(head, "expired", when=NOW - 1000, **{"Woolf-Votes": [no, yes]})
        assert qhub.push((ZERO, backdated, ref)) == [f"{ref}: its commit time is -1000 s off the hub's clock"]

    def test_an_expiry_is_signed_by_a_validator(self, qhub):
        ref = _ref(ALICE_PR, "verdict")
        head, no, yes = self._split(qhub)
        verdict = qhub.verdict(head, "expired", key="alice", when=NOW, **{"Woolf-Votes": [no, yes]})
        assert qhub.push((ZERO, verdict, ref)) == [
            f"{ref}: signed by alice, who is not a validator in ledger/allowed_signers"]


def test_under_a_quorum_a_rejection_names_agreeing_reject_votes(make_hub):
    hub = make_hub(**{"validators.quorum": "2"})
    ref, head = _ref(ALICE_PR, "verdict"), hub.pr()
    on = {"Woolf-Main": hub.genesis}
    assert hub.push((ZERO, hub.verdict(head, **on), ref)) == [f"{ref}: a rejection without a quorum of 2 reject votes"]
    one = hub.vote(head)
    same_voter_twice = hub.vote(one)
    assert hub.push((ZERO, hub.verdict(head, **{"Woolf-Votes": [one, same_voter_twice]}, **on), ref)) == [
        f"{ref}: a rejection without a quorum of 2 reject votes"]
    two = hub.vote(head, "val2", key="val2")
    assert hub.push((ZERO, hub.verdict(head, **{"Woolf-Votes": [one, two]}, **on), ref)) == []
    assert hub.push((ZERO, hub.verdict(head, **{"Woolf-Votes": [one, two]}), ref)) == [
        f"{ref}: a rejection under a quorum names the main on main's chain its votes were cast against (Woolf-Main)"]


def test_reject_votes_cast_against_an_earlier_main_count_for_no_rejection(make_hub):
    """Issue 25: v1 rejected against version 0, val2 against version 1: no two agreed on one main."""
    hub = make_hub(**{"validators.quorum": "2"})
    ref, head = _ref(ALICE_PR, "verdict"), hub.pr()
    v1 = hub.version(hub.genesis, 1, key="work")  # a maintainer's change: main moved
    hub.set(layout.MAIN, v1)
    old = hub.vote(head)  # cast against genesis
    new = hub.vote(head, "val2", key="val2", **{"Woolf-Main": v1})
    verdict = hub.verdict(head, **{"Woolf-Votes": [old, new], "Woolf-Main": v1})
    problem = hub.push((ZERO, verdict, ref))
    assert len(problem) == 1 and "a rejection without a quorum of 2 reject votes" in problem[0]
    assert "cast against" in problem[0]


def test_a_malformed_allowed_signers_on_main_is_a_problem_for_a_verdict(make_hub):
    hub = make_hub(signed=False)
    message = format_message("woolf: version 1", {"Woolf-Version": 1, "Woolf-Change": "signers"})
    change = _commit(hub.repo, _tree_with(hub.repo, hub.genesis, SIGNERS_PATH, b"garbage line\n"), message,
                     [hub.genesis])
    assert hub.push((hub.genesis, change, layout.MAIN)) == []  # anyone may change an unsigned ledger's main
    hub.set(layout.MAIN, change)
    ref = _ref(ALICE_PR, "verdict")
    errors = hub.push((ZERO, hub.verdict(hub.pr()), ref))
    assert len(errors) == 1 and errors[0].startswith(f"{ref}: ")


def test_an_unsigned_ledger_takes_unsigned_verdicts(make_hub):
    hub = make_hub(signed=False)
    head = hub.pr()
    assert hub.push((ZERO, hub.verdict(head, key=None), _ref(ALICE_PR, "verdict"))) == []
    assert hub.push((ZERO, hub.verdict(head, parents=[hub.genesis], key=None), _ref(ALICE_PR, "verdict"))) == [
        f"{_ref(ALICE_PR, 'verdict')}: a verdict commit's one parent is the PR's head"]


# -- votes -------------------------------------------------------------------------------------


VOTE_REF = "a vote ref is refs/woolf/pr/<submission id>/votes/<validator name>"


@pytest.mark.parametrize("ref", [f"refs/woolf/pr/{ALICE_PR}/votes/Val", f"refs/woolf/pr/{ALICE_PR}/votes/-val",
                                 "refs/woolf/pr/not-an-id/votes/val"])
def test_a_vote_ref_names_a_pr_and_a_validator(hub, ref):
    assert hub.push((ZERO, hub.vote(hub.pr()), ref)) == [f"{ref}: {VOTE_REF}"]


def test_votes_are_cast_on_an_existing_pr_and_never_deleted(hub):
    ref = _ref(ALICE_PR, "votes/val")
    head = hub.pr(opened=False)
    vote = hub.vote(head)
    assert hub.push((ZERO, vote, ref)) == [f"{ref}: a vote on a pull request that does not exist"]
    assert hub.push((ZERO, head, _ref(ALICE_PR, "head")), (ZERO, vote, ref)) == []
    assert hub.push((vote, ZERO, ref)) == [f"{ref}: votes are never deleted"]


def test_a_vote_is_a_vote_commit_on_this_pr(hub):
    ref, head = _ref(ALICE_PR, "votes/val"), hub.pr()
    plain = _commit(hub.repo, hub.tree, "I vote yes\n", [head], key="val")
    assert hub.push((ZERO, plain, ref)) == [f"{ref}: not a vote on this PR: no Woolf-Vote: accept|reject trailer"]
    other = hub.vote(head, sub_id=MALLORY_PR)
    assert hub.push((ZERO, other, ref)) == [f"{ref}: not a vote on this PR: a vote on another PR ({MALLORY_PR!r})"]
    blob = _git(hub.repo, "hash-object", "-w", "--stdin", input=b"Woolf-Vote: accept\n")
    assert hub.push((ZERO, blob, ref)) == [f"{ref}: not a vote on this PR: not a commit (blob)"]
    accept = hub.vote(head, **{"Woolf-Vote": "accept"})
    assert hub.push((ZERO, accept, ref)) == [f"{ref}: not a vote on this PR: an accept without a Woolf-Candidate-Sha256"]


def test_a_vote_lands_on_its_voters_ref_after_the_head_or_its_previous_vote(hub):
    ref, head = _ref(ALICE_PR, "votes/val"), hub.pr()
    assert hub.push((ZERO, hub.vote(head, "val2", key="val2"), ref)) == [f"{ref}: a vote by val2 on val's ref"]
    chain = "a vote's one parent is the PR's head (first vote) or the validator's previous vote"
    assert hub.push((ZERO, hub.vote(hub.genesis), ref)) == [f"{ref}: {chain}"]
    first = hub.vote(head)
    assert hub.push((ZERO, first, ref)) == []
    hub.set(ref, first)
    assert hub.push((first, hub.vote(first), ref)) == []
    rewrite = hub.vote(head, **{"Woolf-Reason": "rewritten"})  # its history rewritten
    assert hub.push((first, rewrite, ref)) == [f"{ref}: {chain}"]


@pytest.mark.parametrize(("key", "problem"), [
    (None, "no signature (needs a validator key)"),
    ("val2", "signed by val2 but cast as val's vote"),
    ("alice", "signed by alice, who is not a validator in ledger/allowed_signers"),
    ("mallory", "a good signature by a key not in allowed_signers (needs a validator key)"),
])
def test_a_vote_is_signed_by_the_validator_it_names(hub, key, problem):
    ref = _ref(ALICE_PR, "votes/val")
    assert hub.push((ZERO, hub.vote(hub.pr(), key=key), ref)) == [f"{ref}: {problem}"]


# -- tasks (woolf/protocol/rules/tasks.py: tests/protocol/rules/test_tasks.py) ------------------------


def test_task_refs_are_checked_by_the_task_rules(hub):
    task_id = "20260101T000000000Z-alice-0123abcd"
    rec = TaskRecord(task_id, "reserved", "alice", 0, hub.genesis, "alice@v0", 60, 600.0)
    good = _commit(hub.repo, hub.tree, rec.message(), [hub.genesis], key="alice")
    assert hub.push((ZERO, good, task_ref(task_id))) == []
    unsigned = _commit(hub.repo, hub.tree, rec.message(), [hub.genesis])
    assert hub.push((ZERO, unsigned, task_ref(task_id))) == [
        f"{task_ref(task_id)}: a record of alice's task must be signed by alice's key"]
    assert hub.push((ZERO, good, "refs/woolf/task/x")) == [
        "refs/woolf/task/x: 'x' is not a task id (<time>-<contributor>-<8 hex>)"]


# -- sizes -------------------------------------------------------------------------------------


def _size(hub: Hub, sha: str) -> int:
    return int(_git(hub.repo, "cat-file", "-s", sha))


def test_a_push_adds_at_most_push_max_objects(hub):
    n = PUSH_MAX_OBJECTS + 1
    stream = ["commit refs/tmp/many", "committer t <t@t> 0 +0000", "data 5", "many"]
    stream += [f"M 100644 inline f{i}\ndata {len(str(i)) + 1}\n{i}\n" for i in range(n)]
    _git(hub.repo, "fast-import", "--quiet", input=("\n".join(stream) + "\n").encode())
    head = _git(hub.repo, "rev-parse", "refs/tmp/many")
    _git(hub.repo, "update-ref", "-d", "refs/tmp/many")  # unreferenced, as in the hook's quarantine
    too_many = f"this push adds {n + 2} objects, over the limit of {PUSH_MAX_OBJECTS}"
    assert hub.push((ZERO, head, _ref(ALICE_PR, "head"))) == [too_many]
    # nothing else of an oversized push is read: the stray ref is not even reported
    assert hub.push((ZERO, head, _ref(ALICE_PR, "comments")), (ZERO, head, "refs/heads/evil")) == [too_many]


def test_a_push_adds_at_most_push_max_bytes_of_new_objects(hub):
    blob = _git(hub.repo, "hash-object", "-w", "--stdin", input=b"\0" * PUSH_MAX_BYTES)  # a pack of kilobytes
    tree = _git(hub.repo, "mktree", input=f"100644 blob {blob}\tjunk.bin\n".encode())
    head = _commit(hub.repo, tree, "junk\n", [hub.genesis])
    total = PUSH_MAX_BYTES + _size(hub, tree) + _size(hub, head)
    assert hub.push((ZERO, head, _ref(ALICE_PR, "head"))) == [
        f"this push adds {total} bytes of objects, over the limit of {PUSH_MAX_BYTES}"]
    # only new objects count: a commit on one the hub has, with the same tree, adds itself
    kept = _commit(hub.repo, tree, "on the hub already\n", [hub.genesis])
    hub.set(_ref(MALLORY_PR, "head"), kept)
    assert hub.push((ZERO, _commit(hub.repo, tree, "again\n", [kept]), _ref(ALICE_PR, "head"))) == []


def test_no_commit_outside_main_is_over_commit_max_bytes(hub):
    big = _commit(hub.repo, hub.tree, "big\n\n" + "x" * COMMIT_MAX_BYTES + "\n", [hub.genesis])
    assert hub.push((ZERO, big, _ref(ALICE_PR, "head"))) == [
        f"commit {big[:12]} is {_size(hub, big)} bytes, over the limit of {COMMIT_MAX_BYTES}"]
    rec = "20260101T000000000Z-alice-0123abcd"
    assert hub.push((ZERO, big, task_ref(rec))) == hub.push((ZERO, big, _ref(ALICE_PR, "head")))


def test_a_push_naming_objects_the_hub_lacks_is_refused(hub):
    assert hub.push((ZERO, "1" * 40, _ref(ALICE_PR, "head"))) == [
        "the pushed objects cannot be listed (a missing object?)"]
