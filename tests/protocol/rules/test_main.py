"""The rules for main (woolf/protocol/rules/main.py), unit-tested on hand-made commits.

version_kind reads trailers; shape_problem and chain_problems read a plain `git init`
repository whose commits are built with git plumbing (hash-object, mktree, commit-tree),
signed with `git -c gpg.format=ssh -c user.signingkey=KEY commit-tree -S`: no `woolf init`,
no DVC, no hub. Every commit is what an attacker who read the code could write.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import key_for
from tests.gitobjects import Templates, commit_tree, copied
from tests.gitobjects import git_out as _git
from tests.gitobjects import pub as _pub
from tests.gitobjects import tree_of as _tree
from woolf.git.repo import Git, clean_env
from woolf.protocol import layout
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides, render_config
from woolf.protocol.rules.main import chain_problems, shape_problem, version_kind
from woolf.protocol.signers import SIGNERS_PATH, Signers, signer_line
from woolf.protocol.trailers import format_message, parse_message
from woolf.storage.pointer import Pointer

pytestmark = pytest.mark.unit

def _commit(repo: Path, files: dict, message: str, parents=(), key: Path | None = None) -> str:
    return commit_tree(repo, _tree(repo, files), message, parents, key)


# work: maintainer and validator (the creator); boss: maintainer only; val: validator; alice: contributor;
# mallory has a key that is in no allowed_signers
SIGNERS = Signers.parse("\n".join([
    signer_line("work", _pub("work"), ["maintainer", "validator"]), signer_line("boss", _pub("boss"), ["maintainer"]),
    signer_line("val", _pub("val"), ["validator"]), signer_line("alice", _pub("alice"))])).render()
SUB_ID = "20260101T000000000Z-alice-0123abcd"


def _pointer(md5: str) -> bytes:
    return Pointer(md5, 123, "model.safetensors").render()


def _files(signed: bool = True, **overrides) -> dict:
    cfg = apply_overrides(LedgerConfig(), overrides) if overrides else LedgerConfig()
    files = {layout.CONFIG: render_config(cfg).encode(), layout.POINTER: _pointer("0" * 32),
             "ledger/benchmark/benchmark.txt": b"held-out text\n"}
    if signed:
        files[SIGNERS_PATH] = SIGNERS.encode()
    return files


def _version(number: int, **fields) -> str:
    return format_message(f"woolf: version {number}", {"Woolf-Version": number, **fields})


class Chain:
    """A repository with a genesis (signed by work unless unsigned) and helpers to build versions on it."""

    def __init__(self, repo: Path, signed: bool = True, **overrides):
        self.repo = repo
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        self.git = Git(repo)
        self.files = _files(signed, **overrides)
        self.genesis = _commit(repo, self.files, _version(0, **{"Woolf-Weights-Sha256": "ab" * 32}),
                               key=key_for("work") if signed else None)
        self.pr_head(self.genesis)  # the trees most tests build, made once in the template
        for n in range(1, 4):
            _tree(repo, {**self.files, layout.POINTER: _pointer(f"{n:032x}")})

    def pr_head(self, parent: str) -> str:
        _, ptr, meta = layout.submission_paths(SUB_ID)
        return _commit(self.repo, {**self.files, ptr: _pointer("1" * 32), meta: b"{}"}, "pr\n", [parent])

    def merge(self, parent: str, number: int, key=None, files: dict | None = None, **fields) -> str:
        head = self.pr_head(parent)
        files = files if files is not None else {**self.files, layout.POINTER: _pointer(f"{number:032x}")}
        return _commit(self.repo, files, _version(number, **{"Woolf-Submission": SUB_ID, **fields}),
                       [parent, head], key=key)

    def change(self, parent: str, number: int, files: dict, key=None) -> str:
        return _commit(self.repo, files, _version(number, **{"Woolf-Change": "config"}), [parent], key=key)

    def shape(self, commit: str) -> str | None:
        parents = self.git.parents(commit)
        _, fields = parse_message(self.git.message(commit))
        return shape_problem(self.git, commit, parents, fields, version_kind(fields))

    def copy(self, dest: Path) -> Chain:
        """This repository copied to ``dest`` (one genesis built per module, not per test)."""
        twin = copied(self, dest)
        twin.git = Git(dest)
        return twin


@pytest.fixture(scope="module")
def _templates(tmp_path_factory) -> Templates:
    return Templates(tmp_path_factory.mktemp("main-rules"), Chain)


@pytest.fixture
def make_chain(tmp_path, _templates):
    """make_chain(signed=True, **config overrides): a fresh copy of that repository for this test."""
    return lambda signed=True, **overrides: _templates.copy_for(tmp_path, signed, **overrides)


@pytest.fixture
def unsigned(make_chain) -> Chain:
    return make_chain(signed=False)


@pytest.fixture
def signed(make_chain) -> Chain:
    return make_chain()


# -- version_kind ------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "kind"), [
    ({}, None),
    ({"Woolf-Version": "0"}, "genesis"),
    ({"Woolf-Version": "3"}, None),  # numbered, but neither a merge nor a change
    ({"Woolf-Version": "x"}, None),
    ({"Woolf-Version": " 1"}, None),
    ({"Woolf-Version": "\u0663"}, None),  # a non-ASCII digit is no number
    ({"Woolf-Version": "1" * 31}, None),  # over INT_MAX_DIGITS
    ({"Woolf-Change": "config"}, None),  # no number at all
    ({"Woolf-Version": "2", "Woolf-Change": "config"}, "change"),
    ({"Woolf-Version": "2", "Woolf-Change": ""}, None),
    ({"Woolf-Version": "2", "Woolf-Submission": SUB_ID}, "merge"),
    ({"Woolf-Version": "2", "Woolf-Submission": SUB_ID, "Woolf-Change": "config"}, "change"),
    ({"Woolf-Version": "0", "Woolf-Submission": SUB_ID}, "merge"),  # a merge numbered 0: numbering refuses it
])
def test_version_kind_reads_the_number_then_change_then_submission(fields, kind):
    assert version_kind(fields) == kind


# -- shape_problem ------------------------------------------------------------------------------


def test_a_plain_commit_is_not_a_version(unsigned):
    plain = _commit(unsigned.repo, unsigned.files, "just a commit\n", [unsigned.genesis])
    assert unsigned.shape(plain) == ("not a version commit (no Woolf-Version trailer, or neither a merge nor a change)")
    numbered = _commit(unsigned.repo, unsigned.files, _version(1), [unsigned.genesis])
    assert unsigned.shape(numbered) == unsigned.shape(plain)


def test_genesis_has_no_parent(unsigned):
    assert unsigned.shape(unsigned.genesis) is None
    second = _commit(unsigned.repo, unsigned.files, _version(0), [unsigned.genesis])
    assert unsigned.shape(second) == "a version 0 that has a parent"


def test_a_merge_has_two_parents(unsigned):
    g = unsigned.genesis
    files = {**unsigned.files, layout.POINTER: _pointer("2" * 32)}
    one = _commit(unsigned.repo, files, _version(1, **{"Woolf-Submission": SUB_ID}), [g])
    assert unsigned.shape(one) == "a merge version with 1 parents (needs version and submission)"
    three = _commit(unsigned.repo, files, _version(1, **{"Woolf-Submission": SUB_ID}),
                    [g, unsigned.pr_head(g), _commit(unsigned.repo, files, "another\n", [g])])
    assert unsigned.shape(three) == "a merge version with 3 parents (needs version and submission)"
    assert unsigned.shape(unsigned.merge(g, 1)) is None


def test_a_merge_changes_only_the_weights_and_state_pointers(unsigned):
    g, files = unsigned.genesis, unsigned.files
    state = {**files, layout.POINTER: _pointer("3" * 32), layout.STATE_POINTER: _pointer("4" * 32)}
    assert unsigned.shape(unsigned.merge(g, 1, files=state)) is None
    config = {**files, layout.POINTER: _pointer("3" * 32), layout.CONFIG: b"name = 'mine'\n"}
    assert unsigned.shape(unsigned.merge(g, 1, files=config)) == "the merge also changes ['ledger/woolf.toml']"
    _, ptr, meta = layout.submission_paths(SUB_ID)  # the PR's own files leaked into the version
    leaked = {**files, meta: b"{}", SIGNERS_PATH: b"# mine now\n"}
    assert unsigned.shape(unsigned.merge(g, 1, files=leaked)) == (
        f"the merge also changes {sorted([SIGNERS_PATH, meta])}")


def test_a_change_has_one_parent_and_keeps_the_weights(unsigned):
    g, files = unsigned.genesis, unsigned.files
    head = unsigned.pr_head(g)
    two = _commit(unsigned.repo, files, _version(1, **{"Woolf-Change": "config"}), [g, head])
    assert unsigned.shape(two) == "a change version with 2 parents"
    weights = unsigned.change(g, 1, {**files, layout.POINTER: _pointer("5" * 32)})
    assert unsigned.shape(weights) == (
        "the change touches ['ledger/weights/model.safetensors.dvc'] (a change may touch only config, signers, benchmark)")
    state = unsigned.change(g, 1, {**files, layout.STATE_POINTER: _pointer("6" * 32), "README.md": b"hi\n"})
    assert unsigned.shape(state) == (
        "the change touches ['README.md', 'ledger/weights/outer.safetensors.dvc'] "
        "(a change may touch only config, signers, benchmark)")
    allowed = {**files, layout.CONFIG: render_config(LedgerConfig(name="renamed")).encode(),
               SIGNERS_PATH: SIGNERS.encode(), "ledger/benchmark/benchmark.txt": b"new held-out text\n",
               "ledger/benchmark/more.txt": b"more\n"}
    assert unsigned.shape(unsigned.change(g, 1, allowed)) is None


@pytest.mark.parametrize("path", ["ledger/woolf.toml.d/hook.py", "ledger/allowed_signers2"])
def test_a_change_touches_nothing_that_only_starts_like_the_config_or_signers(unsigned, path):
    sneaky = unsigned.change(unsigned.genesis, 1, {**unsigned.files, path: b"x\n"})
    assert unsigned.shape(sneaky) == (
        f"the change touches ['{path}'] (a change may touch only config, signers, benchmark)")


# -- chain_problems: shape and numbering --------------------------------------------------------


def test_an_unsigned_chain_of_each_kind_has_no_problem(unsigned):
    g = unsigned.genesis
    files = {**unsigned.files, layout.CONFIG: render_config(LedgerConfig(name="b")).encode()}
    v1 = unsigned.change(g, 1, files)
    v2 = unsigned.merge(v1, 2, files={**files, layout.POINTER: _pointer("2" * 32)})
    assert chain_problems(unsigned.git, [g, v1, v2], 0) == {g: [], v1: [], v2: []}
    assert chain_problems(unsigned.git, [v1, v2]) == {v1: [], v2: []}  # no first number: counted from v1


def test_versions_are_numbered_consecutively(unsigned):
    g = unsigned.genesis
    v1 = unsigned.merge(g, 1)
    v3 = unsigned.merge(v1, 3)
    assert chain_problems(unsigned.git, [v1, v3], 1) == {
        v1: [], v3: ["numbered 3, expected 2 (versions must be consecutive)"]}
    assert chain_problems(unsigned.git, [v1, v3]) == chain_problems(unsigned.git, [v1, v3], 1)
    assert chain_problems(unsigned.git, [v3], 1) == {v3: ["numbered 3, expected 1 (versions must be consecutive)"]}
    again = unsigned.merge(v1, 1)  # a second version 1 (a replayed number)
    assert chain_problems(unsigned.git, [v1, again]) == {
        v1: [], again: ["numbered 1, expected 2 (versions must be consecutive)"]}


def test_a_commit_that_is_no_version_breaks_the_chain_but_not_the_count(unsigned):
    g = unsigned.genesis
    plain = _commit(unsigned.repo, unsigned.files, "sneaked in\n", [g])
    v2 = unsigned.merge(plain, 2)
    assert chain_problems(unsigned.git, [plain, v2], 1) == {plain: [
        "numbered None, expected 1 (versions must be consecutive)",
        "not a version commit (no Woolf-Version trailer, or neither a merge nor a change)"], v2: []}


# -- chain_problems: signatures (the keys of the first parent) -----------------------------------


def test_genesis_is_signed_by_a_maintainer_in_its_own_allowed_signers(signed):
    good = signed
    assert chain_problems(good.git, [good.genesis], 0) == {good.genesis: []}
    repo = good.repo
    by_val = _commit(repo, good.files, _version(0), key=key_for("val"))
    assert chain_problems(good.git, [by_val]) == {by_val: [
        "signed by val, who is not a maintainer in ledger/allowed_signers"]}
    unsigned = _commit(repo, good.files, _version(0))
    assert chain_problems(good.git, [unsigned]) == {unsigned: ["no signature (needs a maintainer key)"]}
    by_stranger = _commit(repo, good.files, _version(0), key=key_for("mallory"))
    assert chain_problems(good.git, [by_stranger]) == {by_stranger: [
        "a good signature by a key not in allowed_signers (needs a maintainer key)"]}


def test_a_merge_is_signed_by_a_validator(signed):
    g = signed.genesis
    cases = {
        signed.merge(g, 1, key=key_for("val")): [],
        signed.merge(g, 1, key=key_for("work")): [],
        signed.merge(g, 1, key=key_for("alice")): ["signed by alice, who is not a validator in ledger/allowed_signers"],
        signed.merge(g, 1, key=key_for("boss")): ["signed by boss, who is not a validator in ledger/allowed_signers"],
        signed.merge(g, 1, key=key_for("mallory")): [
            "a good signature by a key not in allowed_signers (needs a validator key)"],
        signed.merge(g, 1): ["no signature (needs a validator key)"],
    }
    for commit, expected in cases.items():
        assert chain_problems(signed.git, [commit], 1) == {commit: expected}


def test_a_change_is_signed_by_a_maintainer(signed):
    g = signed.genesis
    files = {**signed.files, layout.CONFIG: render_config(LedgerConfig(name="changed")).encode()}
    by_boss = signed.change(g, 1, files, key=key_for("boss"))
    by_val = signed.change(g, 1, files, key=key_for("val"))
    assert chain_problems(signed.git, [by_boss], 1) == {by_boss: []}
    assert chain_problems(signed.git, [by_val], 1) == {by_val: [
        "signed by val, who is not a maintainer in ledger/allowed_signers"]}


def test_a_stranger_cannot_list_itself_in_the_commit_it_signs(signed):
    g = signed.genesis
    me = signer_line("mallory", _pub("mallory"), ["maintainer", "validator"])
    files = {**signed.files, SIGNERS_PATH: (SIGNERS + me + "\n").encode()}
    grab = signed.change(g, 1, files, key=key_for("mallory"))
    assert chain_problems(signed.git, [grab], 1) == {grab: [
        "a good signature by a key not in allowed_signers (needs a maintainer key)"]}


def test_a_removed_validator_key_no_longer_signs_merges(signed):
    g = signed.genesis
    without_val = "".join(ln + "\n" for ln in SIGNERS.splitlines() if not ln.startswith("val "))
    v1 = signed.change(g, 1, {**signed.files, SIGNERS_PATH: without_val.encode()}, key=key_for("work"))
    v2 = signed.merge(v1, 2, key=key_for("val"), files={**signed.files, SIGNERS_PATH: without_val.encode(),
                                                       layout.POINTER: _pointer("7" * 32)})
    assert chain_problems(signed.git, [v1, v2], 1) == {v1: [], v2: [
        "a good signature by a key not in allowed_signers (needs a validator key)"]}


def test_a_validator_signature_transplanted_onto_other_bytes_is_bad(signed):
    honest = signed.merge(signed.genesis, 1, key=key_for("val"), **{"Woolf-Alpha": 1.0})
    raw = subprocess.run(["git", "cat-file", "commit", honest], cwd=signed.repo, capture_output=True,
                         check=True, env=clean_env()).stdout
    forged = _git(signed.repo, "hash-object", "-t", "commit", "-w", "--stdin",
                  input=raw.replace(b"Woolf-Alpha: 1.0", b"Woolf-Alpha: 9.0"))
    assert forged != honest
    assert chain_problems(signed.git, [forged], 1) == {forged: ["a bad signature (needs a validator key)"]}


def test_a_malformed_allowed_signers_is_a_problem_not_a_crash(unsigned):
    chain = unsigned
    bad = _commit(chain.repo, {**chain.files, SIGNERS_PATH: b"alice ssh-ed25519 AAAA\n"}, _version(0),
                  key=key_for("work"))
    assert chain_problems(chain.git, [bad], 0) == {bad: [
        "allowed_signers before it is malformed: ledger/allowed_signers:1: not an allowed-signers line of this ledger"]}


def test_a_quorum_ledger_merge_names_its_votes(make_chain):
    chain = make_chain(**{"validators.quorum": "2"})
    g = chain.genesis
    bare = chain.merge(g, 1, key=key_for("val"))
    assert chain_problems(chain.git, [bare], 1) == {bare: ["a merge without votes on a ledger with validators.quorum = 2"]}
    junk = chain.merge(g, 1, key=key_for("val"), **{"Woolf-Votes": ["not a commit id"]})
    assert chain_problems(chain.git, [junk], 1) == {junk: ["Woolf-Votes must be a list of at most 64 commit ids"]}
