"""A PR's cheap checks before any weights are read: woolf/validator/admission.py `admit`, unit-tested.

The ledger is a plain `git init` repository whose main is a chain of hand-made version commits
(git plumbing: hash-object, read-tree/update-index/write-tree on a private index, commit-tree,
update-ref), opened as `Ledger(root)`: its DVC store is made lazily and admission never touches
it, so no `woolf init`, DVC remote or hub is needed. A PR is a `PullRequest` built directly on a
hand-made head commit. Every byte of the PR is what an attacker who read the code could write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gitobjects import commit_tree
from tests.gitobjects import git_out as _git
from tests.gitobjects import tree_with as _tree_with
from woolf.errors import Rejected
from woolf.forges.base import PullRequest
from woolf.git.repo import COMMIT_MAX_BYTES
from woolf.ledger.ledger import Ledger
from woolf.protocol import layout
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides, render_config
from woolf.protocol.layout import META_MAX_BYTES
from woolf.protocol.trailers import format_message
from woolf.storage.pointer import MAX_BYTES as POINTER_MAX_BYTES
from woolf.storage.pointer import Pointer
from woolf.validator.admission import Admitted, admit

pytestmark = pytest.mark.unit

SUB_ID = "20260101T000000000Z-alice-0123abcd"
DELTA_REL, PTR_REL, META_REL = layout.submission_paths(SUB_ID)
SHA256, MD5, SIZE = "ab" * 32, "cd" * 16, 1234
AREA = f"outside its submission area submissions/{SUB_ID}/"


def _commit(repo: Path, tree: str, message: str, parents=()) -> str:
    return commit_tree(repo, tree, message, parents)


def _version_message(number: int) -> str:
    fields = {"Woolf-Version": number, "Woolf-Weights-Sha256": f"{number:064x}"}
    if number:
        fields["Woolf-Submission"] = f"20250101T000000000Z-bob-{number:08x}"
    return format_message(f"woolf: version {number}", fields)


class Repo:
    """main = versions 0..n (each changing the weights pointer), and a ledger opened on it."""

    def __init__(self, root: Path, versions: int = 0, **overrides):
        root.mkdir()
        _git(root, "init", "-q", "-b", "main")
        self.root = root
        cfg = apply_overrides(LedgerConfig(), overrides) if overrides else LedgerConfig()
        files = {layout.CONFIG: render_config(cfg).encode(), layout.POINTER: Pointer("0" * 32, 1, "model.safetensors").render(),
                 "ledger/benchmark/benchmark.txt": b"held-out\n"}
        self.commits = [_commit(root, _tree_with(root, None, files), _version_message(0))]
        for n in range(1, versions + 1):
            tree = _tree_with(root, self.commits[-1], {layout.POINTER: Pointer(f"{n:032x}", n, "model.safetensors").render()})
            self.commits.append(_commit(root, tree, _version_message(n), [self.commits[-1]]))
        _git(root, "update-ref", layout.MAIN, self.commits[-1])
        self.ledger = Ledger(root)

    def meta(self, base: int | None = None, **patch) -> dict:
        base = len(self.commits) - 1 if base is None else base
        meta = {"schema": 1, "id": SUB_ID, "contributor": "alice", "base_version": base,
                "base_commit": self.commits[base], "message": "",
                "delta": {"kind": "dense", "sha256": SHA256, "md5": MD5, "size": SIZE}}
        meta.update(patch)
        return meta

    def pr(self, changes: dict | None = None, meta=None, pointer=None, parent: str | None = None,
           parents: list[str] | None = None, base: int | None = None) -> PullRequest:
        """A PR head on ``parent`` (default: version ``base``, default main's head) adding its pointer and
        submission.json; ``changes`` adds, replaces or (None) removes any path of that commit."""
        parent = parent or self.commits[len(self.commits) - 1 if base is None else base]
        meta = self.meta(base) if meta is None else meta
        files = {PTR_REL: Pointer(MD5, SIZE, "delta.safetensors").render() if pointer is None else pointer,
                 META_REL: meta if isinstance(meta, (bytes, tuple)) else json.dumps(meta).encode(),
                 **(changes or {})}
        head = _commit(self.root, _tree_with(self.root, parent, files), "submission\n",
                       [parent] if parents is None else parents)
        return PullRequest(SUB_ID, "open", head)

    def admit(self, pr: PullRequest, merged: set[str] | None = None) -> Admitted:
        return admit(self.ledger, pr, self.ledger.head(), merged or set())

    def refused(self, pr: PullRequest, merged: set[str] | None = None) -> str:
        with pytest.raises(Rejected) as info:
            self.admit(pr, merged)
        assert info.value.hint is None
        return str(info.value)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Repo:
    """Shared by the tests of this module: each adds only unreferenced PR objects, never moves a ref."""
    return Repo(tmp_path_factory.mktemp("admission") / "ledger")


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> Repo:
    """main = versions 0, 1, 2 (shared like ``repo``)."""
    return Repo(tmp_path_factory.mktemp("admission") / "chain", versions=2)


def test_the_ledger_opens_on_plain_git_without_dvc(repo):
    led = repo.ledger
    assert led.store._repo is None and led.head().version == 0 and led.config.merge.max_staleness == 16
    assert not (repo.root / ".dvc").exists()


def test_a_well_formed_pr_is_admitted(chain):
    sub = chain.admit(chain.pr(base=1))
    assert (sub.base.version, sub.base.commit, sub.staleness) == (1, chain.commits[1], 1)
    assert sub.pointer == Pointer(MD5, SIZE, "delta.safetensors")
    assert sub.meta == chain.meta(1) and sub.screened is None
    assert not (chain.root / ".dvc").exists() and chain.ledger.store._repo is None  # storage was never touched


# -- the commit and its base -------------------------------------------------------------------


def test_a_submission_is_one_plain_commit(repo):
    other = _commit(repo.root, _tree_with(repo.root, repo.commits[0], {}), "another\n", [repo.commits[0]])
    assert repo.refused(repo.pr(parents=[repo.commits[0], other])) == (
        "the PR head has 2 parents; a submission is one plain commit")
    assert repo.refused(repo.pr(parents=[])) == "the PR head has 0 parents; a submission is one plain commit"


def test_a_pr_is_one_commit_on_a_version_commit(repo):
    between = _commit(repo.root, _tree_with(repo.root, repo.commits[0], {}), "wip\n", [repo.commits[0]])
    assert repo.refused(repo.pr(parent=between)) == (
        "the PR is not one commit on top of a version commit (more than one commit, or based on something else)")


def test_a_parent_over_the_commit_limit_is_refused_unread(repo):
    huge = _commit(repo.root, _tree_with(repo.root, repo.commits[0], {}),
                   "x\n\nWoolf-Version: 0\n" + "a" * COMMIT_MAX_BYTES + "\n", [repo.commits[0]])
    size = int(_git(repo.root, "cat-file", "-s", huge))
    assert repo.refused(repo.pr(parent=huge)) == (
        f"the PR's parent commit is {size} bytes, over the limit of {COMMIT_MAX_BYTES} (a version commit is a few KiB)")


def test_the_base_is_a_version_on_main(chain):
    repo = chain
    tree = _tree_with(repo.root, repo.commits[0], {})
    forged_root = _commit(repo.root, tree, _version_message(0) + "Woolf-Source: mine\n")  # the attacker's own genesis
    assert repo.refused(repo.pr(parent=forged_root, meta=repo.meta(0, base_commit=forged_root))) == (
        f"the PR's base {forged_root[:12]} (version 0) is not on main")
    ahead = _commit(repo.root, tree, _version_message(7), [repo.commits[1]])  # numbered past main
    assert repo.refused(repo.pr(parent=ahead, meta=repo.meta(1, base_version=7, base_commit=ahead))) == (
        f"the PR's base {ahead[:12]} (version 7) is not on main")
    sibling = _commit(repo.root, tree, _version_message(1) + "Woolf-Source: mine\n", [repo.commits[0]])  # another v1
    assert repo.refused(repo.pr(parent=sibling, meta=repo.meta(1, base_commit=sibling))) == (
        f"the PR's base {sibling[:12]} (version 1) is not on main")


def test_a_pr_more_than_max_staleness_behind_main_is_refused(tmp_path):
    repo = Repo(tmp_path / "ledger", versions=3, **{"merge.max_staleness": "2"})
    assert repo.admit(repo.pr(base=1)).staleness == 2
    assert repo.refused(repo.pr(base=0)) == (
        "staleness 3 is over the ledger's max_staleness 2; train again from the current version")


# -- the files it writes -----------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    layout.CONFIG, "ledger/allowed_signers", ".github/workflows/evil.yml", f"submissions/{SUB_ID}/extra.bin",
    DELTA_REL, "submissions/20260101T000000000Z-bob-89abcdef/submission.json",
    f"submissions/{SUB_ID}/submission.json/x", "submissions/README"])
def test_a_pr_writes_only_its_pointer_and_submission_json(repo, path):
    if path.endswith("submission.json/x"):  # submission.json as a directory
        pr = repo.pr(meta=None, changes={META_REL: None, path: b"{}"})
    else:
        pr = repo.pr(changes={path: b"x = 1\n"})
    assert repo.refused(pr) == f"the PR touches {path}, {AREA}"


def test_a_pr_deletes_nothing(repo):
    assert repo.refused(repo.pr(changes={layout.POINTER: None})) == f"the PR touches {layout.POINTER}, {AREA}"


@pytest.mark.parametrize(("mode", "kind"), [("120000", "a symlink"), ("100755", "mode 100755"),
                                            ("160000", "a submodule")])
@pytest.mark.parametrize("rel", [PTR_REL, META_REL])
def test_a_pr_adds_only_plain_files(repo, mode, kind, rel):
    data = repo.commits[0].encode() if mode == "160000" else (b"/etc/passwd" if mode == "120000" else b"{}")
    assert repo.refused(repo.pr(changes={rel: (mode, data)})) == (
        f"the PR's {rel} is {kind} (status A); only new plain files are allowed")


@pytest.mark.parametrize("missing", [PTR_REL, META_REL])
def test_a_pr_has_both_its_pointer_and_submission_json(repo, missing):
    assert repo.refused(repo.pr(changes={missing: None})) == "the PR lacks its delta pointer or submission.json"


# -- submission.json ---------------------------------------------------------------------------


def test_an_oversized_submission_json_is_refused_unread(repo):
    meta = repo.meta(message="m" * META_MAX_BYTES)
    raw = json.dumps(meta).encode()
    assert repo.refused(repo.pr(meta=raw)) == (
        f"submission.json is {len(raw)} bytes, over the limit of {META_MAX_BYTES}")


@pytest.mark.parametrize(("raw", "why"), [
    (b"{", "not valid JSON (Expecting property name enclosed in double quotes at byte 1)"),
    (b"\xff\xfe{}", "not valid JSON (not UTF-8)"),
    (b'{"schema": NaN}', "NaN is not JSON"),
    (b'{"schema": -Infinity}', "-Infinity is not JSON"),
    (b"[" * 9 + b"]" * 9, "nested deeper than 8 levels"),
    (b"[" * 30_000 + b"]" * 30_000, "nested deeper than 8 levels"),  # under the size cap: Python's recursion
])
def test_submission_json_that_does_not_parse_is_refused(repo, raw, why):
    assert repo.refused(repo.pr(meta=raw)) == f"submission.json is not valid: {why}"


@pytest.mark.parametrize("meta", [
    [], "meta", 1, {"schema": 1},
    {"schema": 1, "id": SUB_ID, "contributor": "alice", "base_version": 0, "base_commit": "x"},
    "extra key",
])
def test_submission_json_has_exactly_schema_1s_keys(repo, meta):
    if meta == "extra key":
        meta = repo.meta(evil=True)
    assert repo.refused(repo.pr(meta=json.dumps(meta).encode())) == (
        "submission.json does not follow schema 1 (unknown or missing keys)")


@pytest.mark.parametrize("who", ["Alice", "alice\n", "alice bob", "", "-alice", "a" * 40, 5, None, ["alice"],
                                 "alice\u200b", "\x1b[2Jalice"])
def test_submission_json_names_a_contributor(repo, who):
    assert repo.refused(repo.pr(meta=repo.meta(contributor=who))) == (
        f"submission.json does not follow schema 1: contributor {str(who)[:60]!r} is not a contributor name "
        "(1-39 lower-case letters, digits, . _ -; no spaces, newlines or control characters)")


def _delta(**patch) -> dict:
    d = {"kind": "dense", "sha256": SHA256, "md5": MD5, "size": SIZE, **patch}
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize("patch", [
    {"schema": 2}, {"schema": True}, {"schema": "1"}, {"schema": 1.0}, {"id": "20260101T000000000Z-alice-ffffffff"},
    {"base_version": "0"}, {"base_version": True}, {"base_version": 0.0}, {"base_commit": 5},
    {"delta": [1]}, {"delta": _delta(md5=None)}, {"delta": _delta(evil=1)}, {"delta": _delta(sha256=SHA256.upper())},
    {"delta": _delta(sha256=SHA256[:-1])}, {"delta": _delta(md5="g" * 32)}, {"delta": _delta(size=0)},
    {"delta": _delta(size=-1)}, {"delta": _delta(size=True)}, {"delta": _delta(size=1.5)},
    {"delta": _delta(url=5)}, {"delta": _delta(url="https://x/" + "a" * 2040)}, {"delta": _delta(kind=5)},
])
def test_submission_json_has_schema_1s_types_and_values(repo, patch):
    assert repo.refused(repo.pr(meta=repo.meta(**patch))) == (
        "submission.json does not follow schema 1 (bad types or values)")


def test_the_delta_kind_is_one_the_ledger_accepts(repo, tmp_path):
    assert repo.refused(repo.pr(meta=repo.meta(delta=_delta(kind="sparse")))) == (
        "delta kind 'sparse' is not accepted by this ledger (delta.accept: dense, topk)")
    assert repo.refused(repo.pr(meta=repo.meta(delta=_delta(kind="k" * 100)))) == (
        f"delta kind {'k' * 40!r} is not accepted by this ledger (delta.accept: dense, topk)")
    dense_only = Repo(tmp_path / "dense", **{"delta.accept": '["dense"]'})
    topk = _delta(kind="topk", chunk=256, k=5, bits=2)
    assert dense_only.refused(dense_only.pr(meta=dense_only.meta(delta=topk))) == (
        "delta kind 'topk' is not accepted by this ledger (delta.accept: dense)")


@pytest.mark.parametrize(("delta", "why"), [
    (_delta(chunk=256), "a dense delta declares no chunk, k or bits"),
    (_delta(bits=2), "a dense delta declares no chunk, k or bits"),
    (_delta(kind="topk", chunk=256, k=5), "topk delta: a topk delta declares exactly chunk, k and bits"),
    (_delta(kind="topk", chunk=8, k=5, bits=2), "topk delta: chunk 8 is outside [16, 32768]"),
    (_delta(kind="topk", chunk=256, k=0, bits=2), "topk delta: k 0 is outside [1, chunk=256]"),
    (_delta(kind="topk", chunk=256, k=5, bits=3), "topk delta: bits 3 is not one of 2, 4, 8"),
    (_delta(kind="topk", chunk=256, k=True, bits=2), "topk delta: k must be an integer, got True"),
    (_delta(kind="topk", chunk="256", k=5, bits=2), "topk delta: chunk must be an integer, got '256'"),
])
def test_the_delta_declares_exactly_its_kinds_parameters(repo, delta, why):
    assert repo.refused(repo.pr(meta=repo.meta(delta=delta))) == why


def test_a_topk_delta_with_its_parameters_is_admitted(repo):
    topk = _delta(kind="topk", chunk=256, k=5, bits=2)
    assert repo.admit(repo.pr(meta=repo.meta(delta=topk))).meta["delta"] == topk


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://example.com/d", "s3://bucket/d", "javascript:x",
                                 "/etc/passwd"])
def test_a_delta_url_uses_an_allowed_scheme(repo, url):
    assert repo.refused(repo.pr(meta=repo.meta(delta=_delta(url=url)))) == (
        "delta URL scheme is not allowed (allowed: https)")
    assert repo.admit(repo.pr(meta=repo.meta(delta=_delta(url="HTTPS://example.com/d")))).meta["delta"]["url"]


def test_a_delta_over_the_ledgers_size_limit_is_refused(tmp_path):
    repo = Repo(tmp_path / "ledger", **{"limits.max_delta_bytes": "1000"})
    assert repo.refused(repo.pr()) == f"delta is {SIZE} bytes, over the ledger's limit of 1000"


@pytest.mark.parametrize("patch", [{"base_version": 0}, {"base_commit": "0" * 40}])
def test_submission_json_names_the_prs_own_parent_as_base(chain, patch):
    assert chain.refused(chain.pr(meta=chain.meta(1, **patch))) == (
        "submission.json names another base than the PR's parent commit")


# -- the delta pointer -------------------------------------------------------------------------


def test_an_oversized_pointer_is_refused_unread(repo):
    big = Pointer(MD5, SIZE, "delta.safetensors").render() + b"#" * POINTER_MAX_BYTES
    assert repo.refused(repo.pr(pointer=big)) == (
        f"the delta pointer is {len(big)} bytes, over the limit of {POINTER_MAX_BYTES}")


@pytest.mark.parametrize(("raw", "why"), [
    (b"outs: []\n", "expected exactly one output"),
    (b"outs:\n- md5: x\n  size: 1\n  hash: md5\n  path: delta.safetensors\n", "md5 is not 32 hex digits"),
    (f"outs:\n- md5: {MD5}\n  size: -1\n  hash: md5\n  path: delta.safetensors\n".encode(),
     "size is not a non-negative integer"),
    (f"outs:\n- md5: {MD5}\n  size: {SIZE}\n  hash: md5\n  path: ../../etc/passwd\n".encode(),
     "path must be a plain file name"),
    (f"outs:\n- md5: {MD5}\n  size: {SIZE}\n  hash: md5\n  path: d\nmeta: 1\n".encode(), "expected exactly one output"),
])
def test_a_pointer_follows_dvcs_strict_schema(repo, raw, why):
    assert repo.refused(repo.pr(pointer=raw)) == f"{PTR_REL}: not a valid DVC pointer: {why}"


def test_a_pointer_with_yaml_tags_is_data_never_code(repo, tmp_path):
    marker = tmp_path / "pwned"
    raw = f"!!python/object/apply:os.system ['touch {marker}']\n".encode()
    assert repo.refused(repo.pr(pointer=raw)).startswith(f"{PTR_REL}: not a valid DVC pointer: ")
    assert not marker.exists()


@pytest.mark.parametrize("pointer", [Pointer("ef" * 16, SIZE, "delta.safetensors"), Pointer(MD5, SIZE + 1, "delta.safetensors"),
                                     Pointer(MD5, SIZE, "other.safetensors")])
def test_the_pointer_agrees_with_submission_json(repo, pointer):
    assert repo.refused(repo.pr(pointer=pointer.render())) == (
        "the delta pointer disagrees with submission.json (path, md5 or size)")


# -- replays and reverts -----------------------------------------------------------------------


def test_a_delta_already_merged_is_a_replay(repo):
    assert repo.refused(repo.pr(), merged={SHA256}) == f"replay: a delta with sha256 {SHA256[:16]}... was already merged"
    assert repo.admit(repo.pr(), merged={"ef" * 32}).meta["delta"]["sha256"] == SHA256


def test_a_revert_names_a_merge_version_on_main_at_or_before_its_base(chain):
    ok = chain.admit(chain.pr(meta=chain.meta(reverts={"version": 1, "commit": chain.commits[1]})))
    assert ok.meta["reverts"] == {"version": 1, "commit": chain.commits[1]}
    assert chain.refused(chain.pr(meta=chain.meta(reverts={"version": 1, "commit": chain.commits[2]}))) == (
        "submission.json reverts version 1 with another commit than that version on main")


@pytest.mark.parametrize("reverts", [
    {"version": 0, "commit": "0" * 40}, {"version": 3, "commit": "0" * 40}, {"version": True, "commit": "0" * 40},
    {"version": 1.0, "commit": "0" * 40}, {"version": 1, "commit": "A" * 40}, {"version": 1, "commit": "HEAD"},
    {"version": 1}, {"version": 1, "commit": "0" * 40, "extra": 1}, [1], "1", 1,
])
def test_a_malformed_revert_is_refused(chain, reverts):
    assert chain.refused(chain.pr(meta=chain.meta(reverts=reverts))) == (
        "submission.json's reverts is not {version: 1..base, commit: 40 hex}")
