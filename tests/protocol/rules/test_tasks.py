"""Training-task records: woolf/protocol/tasks.py `parse_record` and woolf/protocol/rules/tasks.py
`check_task`, unit-tested on hand-made commits.

A plain `git init` repository holds main (a genesis commit with ledger/woolf.toml and
ledger/allowed_signers, built with git plumbing) and task refs set with update-ref; record
commits are made with commit-tree at a chosen commit time, signed with the contributor's SSH key
where a test says so. The hub's clock is passed to check_task as ``now``. No `woolf init`, DVC or
hub. Every record is what an attacker who read the code could write.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tests.conftest import key_for
from tests.gitobjects import commit_tree as _commit
from tests.gitobjects import copied
from tests.gitobjects import git_out as _git
from tests.gitobjects import pub as _pub
from tests.gitobjects import tree_of as _tree
from woolf.git.repo import Git
from woolf.protocol import layout
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import render_config
from woolf.protocol.rules.tasks import MAX_SKEW, ZERO, check_task
from woolf.protocol.signers import SIGNERS_PATH, Signers, signer_line
from woolf.protocol.tasks import TaskRecord, parse_record, task_ref
from woolf.protocol.trailers import format_message

pytestmark = pytest.mark.unit

NOW = int(time.time())  # the hub's clock in these tests
ALICE = "20260101T000000000Z-alice-0123abcd"
BOB = "20260101T000000000Z-bob-89abcdef"
MALLORY = "20260101T000000000Z-mallory-00ff00ff"


class Tasks:
    """main = one genesis commit (signed ledger: alice and bob have keys, mallory none)."""

    def __init__(self, repo: Path, signed: bool = True):
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        self.repo, self.git = repo, Git(repo)
        files = {layout.CONFIG: render_config(LedgerConfig()).encode(), layout.POINTER: b"pointer\n"}
        if signed:
            files[SIGNERS_PATH] = Signers.parse("\n".join([
                signer_line("work", _pub("work"), ["maintainer", "validator"]), signer_line("val", _pub("val"), ["validator"]),
                signer_line("alice", _pub("alice")), signer_line("bob", _pub("bob"))])).render().encode()
        self.tree = _tree(repo, files)
        self.genesis = _commit(repo, self.tree, format_message("woolf: version 0", {"Woolf-Version": 0}),
                               key=key_for("work") if signed else None)
        _git(repo, "update-ref", layout.MAIN, self.genesis)

    def rec(self, task_id: str = ALICE, state: str = "reserved", **changes) -> TaskRecord:
        who = task_id.split("-")[1]
        base = {"id": task_id, "state": state, "contributor": who, "base_version": 0, "base_commit": self.genesis,
                "shard": f"{who}@v0", "steps": 60, "lease": 600.0}
        return TaskRecord(**{**base, **changes})

    def commit(self, rec: TaskRecord | str, parent: str | None = None, when: int = NOW, key: str | None = "own") -> str:
        """``rec`` (or a raw message) committed on ``parent`` (default: its base) at ``when``; ``key``:
        "own" signs with the task contributor's key, a name with that one's, None leaves it unsigned."""
        message = rec if isinstance(rec, str) else rec.message()
        who = rec.contributor if isinstance(rec, TaskRecord) else "alice"
        signer = key_for(who if key == "own" else key) if key else None
        return _commit(self.repo, self.tree, message, [parent or self.genesis], key=signer, when=when)

    def check(self, new: str, old: str = ZERO, task_id: str = ALICE, now: float = NOW) -> list[str]:
        return check_task(self.git, task_id, old, new, self.git.rev_parse(layout.MAIN), now=now)

    def copy(self, dest: Path) -> Tasks:
        """This repository copied to ``dest`` (one genesis built per module, not per test)."""
        twin = copied(self, dest)
        twin.git = Git(dest)
        return twin


@pytest.fixture(scope="module")
def _templates(tmp_path_factory) -> dict:
    where = tmp_path_factory.mktemp("task-rules")
    return {signed: Tasks(where / f"signed-{signed}", signed) for signed in (True, False)}


@pytest.fixture
def make_tasks(tmp_path, _templates):
    """make_tasks(signed=True): a fresh copy of that repository for this test."""
    return lambda signed=True: _templates[signed].copy(tmp_path / f"repo-{signed}")


@pytest.fixture
def tasks(make_tasks) -> Tasks:
    return make_tasks()


# -- parse_record -------------------------------------------------------------------------------


def _fields(**changes) -> dict:
    fields = {"Woolf-Task": ALICE, "Woolf-Task-State": "reserved", "Woolf-Contributor": "alice",
              "Woolf-Base-Version": "0", "Woolf-Base-Commit": "a" * 40, "Woolf-Shard": "alice@v0",
              "Woolf-Steps": "60", "Woolf-Lease": "600.0"}
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


def _message(**changes) -> str:
    return "woolf: task\n\n" + "".join(f"{k}: {v}\n" for k, v in _fields(**changes).items())


def test_parse_record_reads_what_task_record_writes():
    rec = TaskRecord(ALICE, "submitted", "alice", 3, "b" * 40, "alice@v3", 60, 600.0,
                     submission="20260101T000001000Z-alice-deadbeef", reason="done")
    assert parse_record(rec.message(), ALICE) == (rec, None)
    plain = TaskRecord(ALICE, "heartbeat", "alice", 3, "b" * 40, "bob@v2", 1, 7 * 86400.0)
    assert parse_record(plain.message(), ALICE) == (plain, None)
    # a Woolf-Submission on a record that is not `submitted` is not kept
    rec, why = parse_record(_message(**{"Woolf-Submission": "20260101T000001000Z-alice-deadbeef"}), ALICE)
    assert why is None and rec.submission is None and rec.state == "reserved"


@pytest.mark.parametrize("bad", ["\x1b[31m", "\r", "\x00", "\x7f", "\x85", "\t"])
def test_parse_record_refuses_control_characters(bad):
    message = _message(**{"Woolf-Reason": f"looks{bad}fine"})
    assert parse_record(message, ALICE) == (None, "a control character in its message (records are printable lines)")


@pytest.mark.parametrize(("changes", "why"), [
    ({"Woolf-Task": BOB}, "its Woolf-Task is not this task's id"),
    ({"Woolf-Task": None}, "its Woolf-Task is not this task's id"),
    ({"Woolf-Task": ALICE + "0"}, "its Woolf-Task is not this task's id"),
    ({"Woolf-Task-State": "done"}, "unknown task state 'done'"),
    ({"Woolf-Task-State": None}, "unknown task state 'None'"),
    ({"Woolf-Task-State": "x" * 100}, f"unknown task state {'x' * 40!r}"),
    ({"Woolf-Contributor": "bob"}, "the contributor is not the one the task id names"),
    ({"Woolf-Contributor": None}, "the contributor is not the one the task id names"),
    ({"Woolf-Base-Version": "-1"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Base-Version": "1.5"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Base-Version": None}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Steps": "0"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Steps": "9" * 31}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Lease": "0"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Lease": "604801"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Lease": "nan"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Lease": "inf"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Lease": "-600"}, "base version, steps or lease missing or out of range"),
    ({"Woolf-Shard": "Alice@v0"}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Shard": "alice"}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Shard": "alice@v"}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Shard": "alice@v1234567890"}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Shard": "alice@v0 "}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Base-Commit": "A" * 40}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Base-Commit": "a" * 39}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Base-Commit": "HEAD"}, "no valid Woolf-Shard or Woolf-Base-Commit"),
    ({"Woolf-Task-State": "submitted"}, "a submitted record without a valid Woolf-Submission"),
    ({"Woolf-Task-State": "submitted", "Woolf-Submission": "../../main"},
     "a submitted record without a valid Woolf-Submission"),
])
def test_parse_record_refuses_malformed_trailers(changes, why):
    assert parse_record(_message(**changes), ALICE) == (None, why)


def test_only_the_last_paragraph_carries_trailers():
    buried = _message() + "\nA trailing paragraph: the trailers above are body text now.\n"
    assert parse_record(buried, ALICE) == (None, "its Woolf-Task is not this task's id")


# -- check_task: a new task ---------------------------------------------------------------------


def test_a_task_signed_by_its_contributor_starts_moves_and_ends(tasks):
    reserved = tasks.commit(tasks.rec())
    assert tasks.check(reserved) == []
    started = tasks.commit(tasks.rec(state="started"), reserved)
    assert tasks.check(started, reserved) == []
    done = tasks.commit(tasks.rec(state="submitted", submission="20260101T000001000Z-alice-deadbeef"), started)
    assert tasks.check(done, started) == []


@pytest.mark.parametrize(("task_id", "shown"), [
    ("../../heads/main", "'../../heads/main'"),
    (ALICE.upper(), repr(ALICE.upper())),
    (ALICE + "\n", repr(ALICE + "\n")),
    ("x" * 200, repr("x" * 80)),
])
def test_a_task_ref_names_a_task_id(tasks, task_id, shown):
    assert tasks.check(tasks.commit(tasks.rec()), task_id=task_id) == [
        f"{shown} is not a task id (<time>-<contributor>-<8 hex>)"]


def test_task_records_are_never_deleted(tasks):
    assert tasks.check(ZERO, tasks.commit(tasks.rec())) == ["task records are never deleted"]


def test_a_record_is_a_small_commit(tasks):
    blob = _git(tasks.repo, "hash-object", "-w", "--stdin", input=tasks.rec().message().encode())
    big = tasks.commit(tasks.rec().message() + "\n" + "x" * (16 * 1024) + "\n")
    for new in (blob, tasks.tree, "1" * 40, big):
        assert tasks.check(new) == ["a task record is a commit of at most 16 KiB"]


def test_a_commit_that_is_no_record_of_this_task(tasks):
    assert tasks.check(tasks.commit(tasks.rec(BOB)), task_id=ALICE) == [
        "not a record of this task: its Woolf-Task is not this task's id"]
    escape = tasks.commit(tasks.rec(reason="\x1b]0;pwned\x07"))
    assert tasks.check(escape) == [
        "not a record of this task: a control character in its message (records are printable lines)"]


def test_a_task_starts_with_a_reserved_record_on_its_base(tasks):
    assert tasks.check(tasks.commit(tasks.rec(state="started"))) == [
        "a task starts with a `reserved` record on its base version"]
    elsewhere = _commit(tasks.repo, tasks.tree, "woolf: version 0\n\nWoolf-Version: 0\n")
    assert tasks.check(tasks.commit(tasks.rec(), parent=elsewhere)) == [
        "a task starts with a `reserved` record on its base version"]


def test_a_task_base_is_on_main(tasks):
    fake = _commit(tasks.repo, tasks.tree, "woolf: version 0\n\nWoolf-Version: 0\n")  # not main's genesis
    off_main = tasks.commit(tasks.rec(base_commit=fake), parent=fake)
    assert tasks.check(off_main) == ["a task's base is a version on main"]
    assert check_task(tasks.git, ALICE, ZERO, tasks.commit(tasks.rec()), None, now=NOW) == [
        "a task's base is a version on main"]


def test_a_merged_submission_head_is_no_base_version(tasks):
    head = _commit(tasks.repo, tasks.tree, "a PR head\n", [tasks.genesis])
    merge = _commit(tasks.repo, tasks.tree, format_message("woolf: version 1", {
        "Woolf-Version": 1, "Woolf-Submission": ALICE}), [tasks.genesis, head])
    _git(tasks.repo, "update-ref", layout.MAIN, merge)
    on_head = tasks.commit(tasks.rec(base_version=1, base_commit=head), parent=head)
    assert tasks.check(on_head) == ["a task's base is a version on main"]


def test_a_lease_is_at_most_the_configs(tasks):
    assert tasks.check(tasks.commit(tasks.rec(lease=600.0))) == []
    assert tasks.check(tasks.commit(tasks.rec(lease=601.0))) == [
        "a task's lease is at most tasks.lease = 600 s (main's config); this one asks 601 s"]


def test_an_unreadable_config_on_main_leaves_the_records_own_lease_bound(tasks):
    broken = _commit(tasks.repo, _tree(tasks.repo, {layout.CONFIG: b"[tasks]\nlease = 60\n[[["}),
                     "woolf: version 1\n\nWoolf-Version: 1\n", [tasks.genesis])
    _git(tasks.repo, "update-ref", layout.MAIN, broken)
    assert tasks.check(tasks.commit(tasks.rec(lease=7 * 86400.0))) == []
    assert tasks.check(tasks.commit(tasks.rec(lease=7 * 86400.0 + 1))) == [
        "not a record of this task: base version, steps or lease missing or out of range"]


def _held(tasks: Tasks, state: str, when: int) -> str:
    """bob's own task on bob@v0 whose tip is a ``state`` record committed at ``when``, in refs."""
    tip = tasks.commit(tasks.rec(BOB), when=when)
    if state != "reserved":
        tip = tasks.commit(tasks.rec(BOB, state=state), tip, when=when)
    _git(tasks.repo, "update-ref", task_ref(BOB), tip)
    return tip


def test_another_contributors_shard_is_not_taken_while_no_task_of_it_ended(tasks):
    squat = tasks.commit(tasks.rec(shard="bob@v0"))
    assert tasks.check(squat) == [
        "the shard bob@v0 is bob's: a task trains its own contributor's shard, or one whose task expired, "
        "was cancelled or failed (`woolf train --take TASK`)"]
    _held(tasks, "submitted", NOW - 5000)  # a submitted task ended, but did not free its shard
    assert tasks.check(squat) == tasks.check(tasks.commit(tasks.rec(shard="bob@v0"), when=NOW - 1))


def test_a_shard_held_by_a_live_lease_by_the_hubs_clock_is_not_taken(tasks):
    _held(tasks, "heartbeat", NOW - 500)  # 100 s of bob's 600 s lease left on the hub's clock
    take = tasks.commit(tasks.rec(shard="bob@v0"), when=NOW + 200)  # the taker's clock runs ahead
    assert tasks.check(take) == [f"the shard bob@v0 is held by task {BOB} (its lease is live by the hub's clock)"]
    assert tasks.check(take, now=NOW + 200) == []  # once the hub's own clock passes it


@pytest.mark.parametrize(("state", "ago"), [("reserved", 601), ("cancelled", 0), ("failed", 0)])
def test_a_shard_whose_task_ended_may_be_taken(tasks, state, ago):
    # the offset, not the time itself, is the parameter: xdist workers must collect the same ids
    _held(tasks, state, NOW - ago)
    assert tasks.check(tasks.commit(tasks.rec(shard="bob@v0"))) == []


# -- check_task: moving a task ------------------------------------------------------------------


def test_a_record_is_never_rewritten(tasks):
    reserved = tasks.commit(tasks.rec())
    beside = tasks.commit(tasks.rec(state="heartbeat"))  # on the base, not on the old tip
    assert tasks.check(beside, reserved) == [
        "a task record's one parent is the task's previous record (it is never rewritten)"]
    merge = _commit(tasks.repo, tasks.tree, tasks.rec(state="heartbeat").message(), [reserved, tasks.genesis],
                    key=key_for("alice"), when=NOW)
    assert tasks.check(merge, reserved) == [
        "a task record's one parent is the task's previous record (it is never rewritten)"]


@pytest.mark.parametrize("final", ["submitted", "cancelled", "failed"])
def test_nothing_follows_a_final_record(tasks, final):
    extra = {"submission": "20260101T000001000Z-alice-deadbeef"} if final == "submitted" else {}
    end = tasks.commit(tasks.rec(state=final, **extra), tasks.commit(tasks.rec()))
    assert tasks.check(tasks.commit(tasks.rec(state="heartbeat"), end), end) == [f"the task already ended ({final})"]


def test_a_record_after_an_unreadable_tip_is_refused(tasks):
    junk = tasks.commit("not a record\n")
    assert tasks.check(tasks.commit(tasks.rec(state="heartbeat"), junk), junk) == [
        "the task already ended (unreadable)"]


@pytest.mark.parametrize("changes", [
    {"shard": "alice@v1"}, {"steps": 61}, {"lease": 60.0}, {"base_version": 1}, {"base_commit": "c" * 40}])
def test_a_record_keeps_its_tasks_terms(tasks, changes):
    reserved = tasks.commit(tasks.rec())
    moved = tasks.commit(dataclasses.replace(tasks.rec(state="heartbeat"), **changes), reserved)
    assert tasks.check(moved, reserved) == [
        "a record keeps its task's contributor, base, shard, steps and lease"]


# -- check_task: the hub's clock and the contributor's key --------------------------------------


@pytest.mark.parametrize(("offset", "problems"), [
    (0, []), (MAX_SKEW, []), (-MAX_SKEW, []),
    (MAX_SKEW + 1, [f"its commit time is +{MAX_SKEW + 1} s off the hub's clock (at most {MAX_SKEW} s): "
                    "fix this machine's clock"]),
    (-3600, [f"its commit time is -3600 s off the hub's clock (at most {MAX_SKEW} s): fix this machine's clock"]),
])
def test_a_record_is_dated_near_the_hubs_clock(tasks, offset, problems):
    reserved = tasks.commit(tasks.rec(), when=NOW + offset)
    assert tasks.check(reserved) == problems
    ok = tasks.commit(tasks.rec())
    assert tasks.check(tasks.commit(tasks.rec(state="heartbeat"), ok, when=NOW + offset), ok) == problems


@pytest.mark.parametrize("key", [None, "bob", "val", "mallory"])
def test_a_listed_contributors_records_are_signed_by_their_key(tasks, key):
    reserved = tasks.commit(tasks.rec(), key=key)
    assert tasks.check(reserved) == ["a record of alice's task must be signed by alice's key"]
    good = tasks.commit(tasks.rec())
    renewal = tasks.commit(tasks.rec(state="heartbeat"), good, key=key)  # nobody else keeps alice's lease alive
    assert tasks.check(renewal, good) == ["a record of alice's task must be signed by alice's key"]


def test_an_unlisted_contributor_and_an_unsigned_ledger_need_no_signature(make_tasks):
    signed = make_tasks()
    assert signed.check(signed.commit(signed.rec(MALLORY), key=None), task_id=MALLORY) == []
    unsigned = make_tasks(signed=False)
    assert unsigned.check(unsigned.commit(unsigned.rec(), key=None)) == []


CAROL = "20260101T000000000Z-carol-0c0c0c0c"  # a contributor without a key: anyone may write her records


def test_a_tasks_own_shard_is_drawn_from_its_base_version(tasks):
    """Issue 25: `mallory@v1001` on version 1 (a shard no version has drawn) was accepted."""
    ahead = tasks.commit(tasks.rec(shard="alice@v1001"))
    assert tasks.check(ahead) == ["a task's own shard is drawn from its base version: alice@v0, not alice@v1001"]


def test_a_forged_cancel_of_a_keyless_task_never_hands_over_its_shard(tasks):
    """Issue 25: mallory wrote a `cancelled` record on carol's live task (carol has no key, so no signature
    binds her records) and took carol's shard. The cancel frees it only when carol's lease is over."""
    tip = tasks.commit(tasks.rec(CAROL), when=NOW - 10, key=None)
    tip = tasks.commit(tasks.rec(CAROL, state="cancelled"), tip, when=NOW - 5, key=None)  # by mallory
    _git(tasks.repo, "update-ref", task_ref(CAROL), tip)
    take = tasks.commit(tasks.rec(MALLORY, shard="carol@v0"), key=None)
    assert tasks.check(take, task_id=MALLORY) == [
        f"the shard carol@v0 is held by task {CAROL} (its lease is live by the hub's clock)"]
    later = tasks.commit(tasks.rec(MALLORY, shard="carol@v0"), when=NOW + 600, key=None)
    assert tasks.check(later, task_id=MALLORY, now=NOW + 600) == []  # once carol's lease is over


@pytest.mark.parametrize("forger", [None, "mallory", "bob"])
def test_a_keyless_task_started_signed_stays_its_signers(tasks, forger):
    """Records of a contributor without a key in allowed_signers were anyone's: a forged `cancelled` or
    `submitted` landed on carol's live task. A task whose first record carol signed (with her own key,
    listed nowhere) now takes later records signed by that key only."""
    tip = tasks.commit(tasks.rec(CAROL), key="carol")
    for state, extra in (("cancelled", {}), ("submitted", {"submission": "20260101T000001000Z-carol-deadbeef"}),
                         ("heartbeat", {})):
        forged = tasks.commit(tasks.rec(CAROL, state=state, **extra), tip, key=forger)
        [problem] = tasks.check(forged, tip, task_id=CAROL)
        assert problem.startswith(f"the first record of task {CAROL} was signed by key SHA256:"), problem
    beat = tasks.commit(tasks.rec(CAROL, state="heartbeat"), tip, key="carol")
    assert tasks.check(beat, tip, task_id=CAROL) == []
    done = tasks.commit(tasks.rec(CAROL, state="cancelled"), beat, key="carol")
    assert tasks.check(done, beat, task_id=CAROL) == []


def test_a_keyless_task_started_unsigned_binds_nothing(tasks):
    """The trade, documented: a keyless participant who signs nothing can have its task ended by anyone."""
    tip = tasks.commit(tasks.rec(CAROL), key=None)
    assert tasks.check(tasks.commit(tasks.rec(CAROL, state="cancelled"), tip, key="mallory"), tip,
                       task_id=CAROL) == []
