"""A training task's records: commits on `refs/woolf/task/<task id>` in the origin, read as attacker-written.

Usage:
    rec = TaskRecord(task_id, "reserved", contributor="alice", base_version=3, base_commit=sha,
                     shard="alice@v3", steps=60, lease=600.0)
    sha = push_record(git, rec, old_tip)               # a commit on old_tip (or on the base), with a lease
    found, bad = read_tasks(git)                       # {task id: (TaskRecord, tip sha, commit time)}, [(ref, why)]

Every record carries the whole task (base, shard, steps, contributor, lease), so a
reader needs only the ref's tip: one `git for-each-ref` and one `git cat-file
--batch` for all tasks (framed by object size: no byte of a message can split a
record). A record with a control character in its message is no record: the hub
refuses it, and a reader skips it (reported in `bad`). Record states: reserved, started,
heartbeat, submitted (with the PR id), cancelled, failed. A record's tree is its base version's; its first parent is the
previous record, or the base version commit for the first one.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass

from woolf.protocol import layout
from woolf.protocol.trailers import float_field, format_message, int_field, parse_message

TASK_PREFIX = "refs/woolf/task"
RECORD_STATES = ("reserved", "started", "heartbeat", "submitted", "cancelled", "failed")
FINAL = ("submitted", "cancelled", "failed")
RECORD_MAX_BYTES = 16 * 1024
SHARD = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,38}@v[0-9]{1,9}\Z")  # <owner>@v<version>: whose shard, of which version
_HEX40 = re.compile(r"^[0-9a-f]{40}\Z")


@dataclass
class TaskRecord:
    id: str
    state: str
    contributor: str
    base_version: int
    base_commit: str
    shard: str
    steps: int
    lease: float
    submission: str | None = None
    reason: str | None = None

    def to_json(self) -> dict:
        return asdict(self)

    def message(self) -> str:
        return format_message(f"woolf: task {self.id} {self.state}", {
            "Woolf-Task": self.id, "Woolf-Task-State": self.state, "Woolf-Contributor": self.contributor,
            "Woolf-Base-Version": self.base_version, "Woolf-Base-Commit": self.base_commit,
            "Woolf-Shard": self.shard, "Woolf-Steps": self.steps, "Woolf-Lease": self.lease,
            "Woolf-Submission": self.submission,
            "Woolf-Reason": " ".join(self.reason.split())[:500] if self.reason else None})


def task_ref(task_id: str) -> str:
    return f"{TASK_PREFIX}/{task_id}"


def parse_record(message: str, task_id: str) -> tuple[TaskRecord | None, str | None]:
    """(record, None) or (None, why the commit is no record of this task)."""
    if any(unicodedata.category(c) == "Cc" for c in message.replace("\n", "")):
        return None, "a control character in its message (records are printable lines)"
    _, f = parse_message(message)
    if f.get("Woolf-Task") != task_id:
        return None, "its Woolf-Task is not this task's id"
    state, who = f.get("Woolf-Task-State"), f.get("Woolf-Contributor") or ""
    if state not in RECORD_STATES:
        return None, f"unknown task state {str(state)[:40]!r}"
    if who != task_id.split("-", 1)[1].rsplit("-", 1)[0]:
        return None, "the contributor is not the one the task id names"
    base, steps, lease = int_field(f, "Woolf-Base-Version"), int_field(f, "Woolf-Steps"), float_field(f, "Woolf-Lease")
    shard, commit = f.get("Woolf-Shard") or "", f.get("Woolf-Base-Commit") or ""
    if base is None or base < 0 or steps is None or steps <= 0 or lease is None or not 0 < lease <= 7 * 86400:
        return None, "base version, steps or lease missing or out of range"
    if not SHARD.match(shard) or not _HEX40.match(commit):
        return None, "no valid Woolf-Shard or Woolf-Base-Commit"
    sub = f.get("Woolf-Submission")
    if state == "submitted" and not (sub and layout.SUBMISSION_ID.match(sub)):
        return None, "a submitted record without a valid Woolf-Submission"
    return TaskRecord(task_id, state, who, base, commit, shard, steps, lease,
                      sub if state == "submitted" else None, f.get("Woolf-Reason")), None


def record_commit(git, rec: TaskRecord, old: str | None) -> tuple[str, str, str | None]:
    """(commit, ref, old): ``rec`` committed on the task's previous record ``old`` (None: a new task),
    not pushed yet (a submitted record rides the push that opens its PR: LocalForge.open's ``also``)."""
    # signed when keyed
    commit = git.commit_tree(f"{rec.base_commit}^{{tree}}", rec.message(), [old or rec.base_commit])
    return commit, task_ref(rec.id), old


def push_record(git, rec: TaskRecord, old: str | None, remote: str = "origin") -> str:
    """Commit ``rec`` on the task's previous record ``old`` (None: a new task) and push it with a lease."""
    commit, ref, _ = record_commit(git, rec, old)
    git.push(remote, [(commit, ref)], leases={ref: old})
    # the local ref only mirrors origin's, and another process of this clone may hold its lock (a fetch
    # of the task refs, taking it to this same commit): raising after the push would make the caller
    # keep the old tip, so that its next record (a heartbeat, the cancel on Ctrl-C) lost its lease
    git.run("update-ref", ref, commit, check=False)
    return commit


def read_tasks(git) -> tuple[dict[str, tuple[TaskRecord, str, int]], list[tuple[str, str]]]:
    """Every task ref's tip as a record with its commit time; (ref, why) for refs that are none."""
    raw = git.out("for-each-ref", "--format=%(objectname) %(objecttype) %(refname)", f"{TASK_PREFIX}/")
    tips, bad = {}, []
    for line in raw.splitlines():
        sha, typ, ref = (line.split(" ", 2) + ["", ""])[:3]
        task_id = ref[len(TASK_PREFIX) + 1:]
        if not layout.SUBMISSION_ID.match(task_id):
            bad.append((ref, "not refs/woolf/task/<task id>"))
        elif typ != "commit":
            bad.append((ref, f"a {typ[:10]}, not a task record"))
        else:
            tips[sha] = task_id
    found = {}
    records = {sha: (ct, message) for sha, _, ct, message in git.commit_records(list(tips), RECORD_MAX_BYTES)}
    for sha, task_id in tips.items():
        if sha not in records:
            bad.append((task_ref(task_id), "a record over the size limit, or unreadable"))
            continue
        rec, why = parse_record(records[sha][1], task_id)
        if rec is None:
            bad.append((task_ref(task_id), why))
        else:
            found[rec.id] = (rec, sha, records[sha][0])
    return found, bad
