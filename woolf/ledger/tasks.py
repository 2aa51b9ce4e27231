"""The training-task lifecycle: reserve a shard with a lease, heartbeat while training, end in a state.

Usage:
    task = reserve(ledger, "alice", head, shard="alice@v3", steps=60)   # UsageError if the shard is held
    with task.running():          # started; heartbeats every lease/3 s; Ctrl-C -> cancelled, error -> failed
        train(...)
    task.finish("submitted", submission=pr_id)
    views, bad = list_tasks(ledger)                                     # `woolf tasks`

States a reader derives (task_state): reserved, started (a heartbeat renews the lease),
submitted, voting (its PR has votes), settled (merged or rejected), expired (the lease
ran out, or its PR expired without quorum), cancelled (Ctrl-C, `woolf pr close`), failed.

Time is the origin's, bounded by this machine's: a lease runs out when the newest commit
time among origin's task records and main's head, or this machine's clock if that is
earlier, passes the task's last record time plus its lease. The hub refuses records
whose commit time is more than MAX_SKEW seconds off its own clock (woolf/protocol/rules/tasks.py),
so a participant whose clock jumps cannot keep its own lease alive, and one record dated
into the future does not expire other readers' leases; a participant who sets its own
clock ahead sees others' tasks expired, but the hub refuses its reservation of their
shards until they expire by the hub's own clock.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import secrets
import threading
import time as _time

from woolf.errors import UsageError, WoolfError
from woolf.forges.local import LocalForge
from woolf.protocol import layout
from woolf.protocol.rules.tasks import LIVE
from woolf.protocol.tasks import (
    FINAL,
    TASK_PREFIX,
    TaskRecord,
    parse_record,
    push_record,
    read_tasks,
    record_commit,
    task_ref,
)

log = logging.getLogger("woolf.tasks")


def fetch_tasks(ledger) -> None:
    ledger.git.fetch("origin", f"+{TASK_PREFIX}/*:{TASK_PREFIX}/*")


def _new_id(who: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    return f"{now:%Y%m%dT%H%M%S}{now.microsecond // 1000:03d}Z-{who}-{secrets.token_hex(4)}"


def origin_now(ledger, found, clock=None) -> int:
    """The origin's clock: the newest commit time among its task records and main's head, but never
    past this machine's own clock. The hub lets a record be dated up to MAX_SKEW s ahead of it, so
    the newest record alone would let one participant's future-dated record expire everyone's
    leases; a reader trusts it only as far as its own clock goes (a slow clock only keeps leases
    alive longer). The hub itself judges a taken shard by its own clock (woolf/protocol/rules/tasks.py)."""
    main = ledger.git.commit_time("refs/remotes/origin/main")
    times = [t for _, _, t in found.values()] + ([main] if main is not None else [])
    return min(max(times, default=0), int(_time.time() if clock is None else clock))


def task_state(rec: TaskRecord, time: int, now: int, prs: dict) -> tuple[str, str | None]:
    """(state, outcome or reason) of a task whose tip record ``rec`` was committed at ``time``."""
    if rec.state in LIVE:
        if now > time + rec.lease:
            return "expired", f"no heartbeat for {now - time} s (lease {rec.lease:g} s)"
        return ("reserved" if rec.state == "reserved" else "started"), None
    if rec.state != "submitted":
        return rec.state, rec.reason
    pr = prs.get(rec.submission)
    if pr is None:
        return "submitted", None
    if pr.state == "open":
        return ("voting", None) if getattr(pr, "votes", 0) else ("submitted", None)
    if pr.state in ("merged", "rejected"):
        return "settled", pr.state
    if pr.state == "expired":
        return "expired", pr.reason
    return ("cancelled", "PR withdrawn") if pr.state == "withdrawn" else ("submitted", pr.state)


def list_tasks(ledger, fetch: bool = True) -> tuple[list[dict], list[tuple[str, str]]]:
    if fetch and ledger.has_origin():
        ledger.fetch()
        fetch_tasks(ledger)
    found, bad = read_tasks(ledger.git)
    now = origin_now(ledger, found)
    prs = {}
    if ledger.config.forge.kind == "local":
        votes: dict[str, int] = {}  # PR id -> vote refs, from one listing
        for ref in ledger.git.refs(f"{layout.PR_PREFIX}/"):
            parts = ref.split("/")
            if len(parts) == 6 and parts[4] == "votes":
                votes[parts[3]] = votes.get(parts[3], 0) + 1
        for pr in LocalForge(ledger.git).list(local_only=True):
            pr.votes = votes.get(pr.id, 0)
            prs[pr.id] = pr
    views = []
    for rec, sha, time in sorted(found.values(), key=lambda x: (x[2], x[0].id)):
        state, detail = task_state(rec, time, now, prs)
        views.append({**rec.to_json(), "record": rec.state, "state": state, "detail": detail, "tip": sha,
                      "last_record_time": time, "lease_expires": time + rec.lease if rec.state in LIVE else None})
    return views, bad


class Task:
    def __init__(self, ledger, rec: TaskRecord, tip: str):
        self.ledger, self.rec, self.tip = ledger, rec, tip
        self._lock = threading.Lock()

    def record(self, state: str, submission: str | None = None, reason: str | None = None) -> None:
        with self._lock:
            if self.rec.state in FINAL:
                return
            rec = TaskRecord(**{**self.rec.to_json(), "state": state, "submission": submission, "reason": reason})
            self.tip = push_record(self.ledger.git, rec, self.tip)
            self.rec = rec

    def finish(self, state: str, submission: str | None = None, reason: str | None = None) -> None:
        self.record(state, submission, reason)

    @contextlib.contextmanager
    def running(self):
        """started, then a heartbeat every lease/3 s until the block ends; cancelled on Ctrl-C, failed on error."""
        self.record("started")
        stop = threading.Event()

        def beat():
            while not stop.wait(max(0.2, self.rec.lease / 3)):
                try:
                    self.record("heartbeat")
                except WoolfError as exc:  # the hub refused it (clock skew) or is unreachable: the lease may lapse
                    log.warning("task %s: heartbeat not recorded: %s", self.rec.id, exc.message)

        thread = threading.Thread(target=beat, name="woolf-heartbeat", daemon=True)
        thread.start()
        try:
            yield self
        except KeyboardInterrupt:
            stop.set()
            thread.join()
            self._quietly("cancelled", "interrupted (Ctrl-C or SIGTERM)")
            raise
        except BaseException as exc:
            stop.set()
            thread.join()
            self._quietly("failed", f"{type(exc).__name__}: {str(exc)[:300]}")
            raise
        stop.set()
        thread.join()

    def _quietly(self, state: str, reason: str) -> None:
        try:
            self.record(state, reason=reason)
        except WoolfError as exc:
            log.warning("task %s: %s not recorded (%s); its lease will expire", self.rec.id, state, exc.message)


def reserve(ledger, who: str, head, shard: str, steps: int) -> Task:
    """Reserve ``shard`` for training from ``head``; refused while another task's lease on it is live."""
    fetch_tasks(ledger)
    found, _ = read_tasks(ledger.git)
    for old, tip, _ in found.values():  # this contributor trains the shard again: its earlier task is superseded
        if old.contributor == who and old.shard == shard and old.state in LIVE:
            Task(ledger, old, tip)._quietly("cancelled", "superseded by a new task on the same shard")
    rec = TaskRecord(_new_id(who), "reserved", who, head.version, head.commit, shard, steps,
                     ledger.config.tasks.lease)
    task = Task(ledger, rec, push_record(ledger.git, rec, None))
    fetch_tasks(ledger)
    found, _ = read_tasks(ledger.git)
    now = origin_now(ledger, found)
    rivals = sorted((t, r.id) for r, _, t in found.values()
                    if r.shard == shard and r.state in LIVE and now <= t + r.lease)
    mine = found.get(rec.id)
    if mine and rivals and rivals[0][1] != rec.id:
        holder = rivals[0][1]
        task.finish("cancelled", reason=f"shard {shard} is held by task {holder}")
        raise UsageError(f"the shard {shard} is reserved by task {holder} until its lease runs out",
                         hint="train another shard (`woolf train --take TASK` for an expired one), or wait")
    return task


def take_shard(ledger, task_id: str) -> str:
    """The shard of an expired, cancelled or failed task, for `woolf train --take`."""
    views, _ = list_tasks(ledger)
    view = next((v for v in views if v["id"] == task_id), None)
    if view is None:
        raise UsageError(f"no task {task_id}", hint="see `woolf tasks`")
    if view["state"] not in ("expired", "cancelled", "failed"):
        raise UsageError(f"task {task_id} is {view['state']}: its shard is not free")
    return view["shard"]


__all__ = ["Task", "fetch_tasks", "list_tasks", "origin_now", "reserve", "take_shard", "task_ref", "task_state"]


# -- the participant's side: reserve before training, record the PR after submit --


def reserve_for_training(ledger, who: str, head, steps: int, take: str | None):
    """The task `woolf train` runs under (None without an origin on the git-native forge)."""
    if not ledger.has_origin() or ledger.config.forge.kind != "local":
        if take:
            raise UsageError("--take needs a ledger with an origin on the git-native forge")
        return None
    return reserve(ledger, who, head, take_shard(ledger, take) if take else f"{who}@v{head.version}", steps)


def _origin_record(ledger, task_id: str):
    """(record, tip) of the task as origin has it now (fetched); (None, tip) when there is none to read."""
    fetch_tasks(ledger)
    tip = ledger.git.rev_parse(task_ref(task_id))
    rec, _ = parse_record(ledger.git.message(tip), task_id) if tip else (None, None)
    return rec, tip


def submitted_update(ledger, task_id: str, sub_id: str):
    """(commit, ref, old) of the task's final record naming PR ``sub_id``, made here and not pushed: it
    rides the push that opens the PR (forges with records_ride_prs). None when the task has no record
    to build on (or it cannot be read: then only its lease expires)."""
    try:
        rec, tip = _origin_record(ledger, task_id)
        if rec is None or rec.state in FINAL:
            return None
        done = TaskRecord(**{**rec.to_json(), "state": "submitted", "submission": sub_id, "reason": None})
        return record_commit(ledger.git, done, tip)
    except WoolfError as exc:
        logging.getLogger("woolf.tasks").warning("task %s: submitted not recorded: %s", task_id, exc.message)
        return None


def record_submitted(ledger, task_id: str, sub_id: str) -> None:
    """The task's final record names its PR, in a push of its own (a failure here leaves only a lease to expire)."""
    try:
        rec, tip = _origin_record(ledger, task_id)
        if rec is not None:
            Task(ledger, rec, tip).finish("submitted", submission=sub_id)
    except WoolfError as exc:
        logging.getLogger("woolf.tasks").warning("task %s: submitted not recorded: %s", task_id, exc.message)


def take_shard_data(shard: str) -> tuple[str, int]:
    """(owner, base version) of a shard named ``owner@vN``: whose data a taken task trains on."""
    owner, _, version = shard.partition("@v")
    return owner, int(version)
