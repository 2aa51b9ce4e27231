"""Which task-record pushes a hub accepts (called by woolf/protocol/rules/push.py for `refs/woolf/task/<id>`).

Usage:
    errors = check_task(git, task_id, old, new, main)      # [] when the update may land

- a task ref is created by a `reserved` record whose parent is a version on main,
  and moves forward one record at a time (its parent is the old tip), never after
  a final record (submitted, cancelled, failed), never deleted;
- a new task's shard is its contributor's own, drawn from its base version
  (`<contributor>@v<base>`), or another's shard that no live task holds and whose task
  ended (expired by the hub's clock, cancelled or failed: `woolf train --take`; a keyless
  contributor's cancel or failure, which anyone could write, frees it only once its lease is
  over); its lease is at most `tasks.lease` of main's config;
- every record keeps the task's contributor, base, shard, steps and lease;
- its commit time is within MAX_SKEW seconds of the hub's clock (leases are timed by
  these commit times, so a participant's clock cannot move them);
- when the contributor the task id names has a key in allowed_signers, every record
  is signed by that key (no one else renews, cancels or rewrites its lease); when it has none,
  a task whose first record was signed (by any key) has every later record signed by that key.
"""

from __future__ import annotations

import time

from woolf.git.commits import read_commit
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.signatures import signatures, signing_keys
from woolf.protocol.signers import Signers, signers_text
from woolf.protocol.tasks import FINAL, RECORD_MAX_BYTES, parse_record, read_tasks
from woolf.protocol.trailers import int_field, parse_message

LIVE = ("reserved", "started", "heartbeat")  # as woolf/ledger/tasks.py

ZERO = "0" * 40
MAX_SKEW = 300  # seconds a record's commit time may differ from the hub's clock
_KEEP = ("contributor", "base_version", "base_commit", "shard", "steps", "lease")


def _is_version_on_main(git, commit: str, number: int, main: str) -> bool:
    """``commit`` is version ``number`` on main's first-parent chain (not merely an ancestor: a
    merged PR's head is one too), counted from main's own number."""
    top = int_field(parse_message(read_commit(git, main)[1])[1], "Woolf-Version")
    if top is None or not 0 <= number <= top:
        return False
    return git.rev_parse(f"{main}~{top - number}") == commit


def check_task(git, task_id: str, old: str, new: str, main: str | None, now: float | None = None) -> list[str]:
    if not layout.SUBMISSION_ID.match(task_id):
        return [f"{task_id[:80]!r} is not a task id (<time>-<contributor>-<8 hex>)"]
    if new == ZERO:
        return ["task records are never deleted"]
    info = git.object_info(new)
    if info is None or info[1] != "commit" or info[2] > RECORD_MAX_BYTES:
        return ["a task record is a commit of at most 16 KiB"]
    parents, message = read_commit(git, new)
    rec, why = parse_record(message, task_id)
    if rec is None:
        return [f"not a record of this task: {why}"]
    if old == ZERO:
        problem = _start_problem(git, rec, parents, main, time.time() if now is None else now)
    else:
        problem = _move_problem(git, task_id, rec, parents, old)
    if problem:
        return [problem]
    stamp = git.commit_time(new)
    skew = stamp - (time.time() if now is None else now) if stamp is not None else float("inf")
    if abs(skew) > MAX_SKEW:
        return [f"its commit time is {skew:+.0f} s off the hub's clock (at most {MAX_SKEW} s): "
                "fix this machine's clock"]
    problem = _signer_problem(git, rec, new, main, moved=old != ZERO)
    return [problem] if problem else []


def _start_problem(git, rec, parents: list[str], main: str | None, now: float) -> str | None:
    """Why ``rec`` may not start its task (None when it may)."""
    if rec.state != "reserved" or parents != [rec.base_commit]:
        return "a task starts with a `reserved` record on its base version"
    if main is None or not _is_version_on_main(git, rec.base_commit, rec.base_version, main):
        return "a task's base is a version on main"
    return _new_task_problem(git, rec, main, now)


def _move_problem(git, task_id: str, rec, parents: list[str], old: str) -> str | None:
    """Why ``rec`` may not follow the task's record ``old`` (None when it may)."""
    prev, _ = parse_record(read_commit(git, old)[1], task_id)
    if parents != [old]:
        return "a task record's one parent is the task's previous record (it is never rewritten)"
    if prev is None or prev.state in FINAL:
        return f"the task already ended ({prev.state if prev else 'unreadable'})"
    if any(getattr(prev, k) != getattr(rec, k) for k in _KEEP):
        return "a record keeps its task's contributor, base, shard, steps and lease"
    return None


def _signer_problem(git, rec, new: str, main: str | None, moved: bool = True) -> str | None:
    """A keyed contributor's records are signed by that contributor's key; a keyless one's, once its task's
    first record was signed, by that record's key (``moved``: ``new`` follows a record). None when fine."""
    text = signers_text(git, main)
    listed: set = set()
    if text is not None:
        try:
            listed = Signers.parse(text.decode(errors="replace")).roles_of(rec.contributor)
        except Exception:  # noqa: BLE001 - a malformed allowed_signers is the chain check's to report
            listed = set()
    if listed:
        status, principal = signatures(git, {new: text}).get(new, ("N", ""))
        if status != "G" or principal != rec.contributor:
            return f"a record of {rec.contributor}'s task must be signed by {rec.contributor}'s key"
        return None
    return _first_key_problem(git, rec, new) if moved else None


def _first_key_problem(git, rec, new: str) -> str | None:
    """A task whose contributor has no key in allowed_signers: when its first record was signed (by any
    SSH key, listed or not), every later record is signed by that key: no one else cancels, submits or
    renews it. A chain started unsigned binds nothing (anyone may write it: docs/protocol.md)."""
    chain = git.out("rev-list", "--first-parent", new, f"^{rec.base_commit}").split()
    if len(chain) < 2:  # the reserved record itself
        return None
    keys = signing_keys(git, [chain[-1], new])
    first = keys.get(chain[-1], "")
    if first and keys.get(new) != first:
        return (f"the first record of task {rec.id} was signed by key {first}: every later record of it must be "
                "signed by that key")
    return None


def _keyed(git, main: str) -> set[str]:
    text = signers_text(git, main)
    try:
        return {e.name for e in Signers.parse(text.decode(errors="replace")).entries} if text else set()
    except Exception:  # noqa: BLE001 - a malformed allowed_signers is the chain check's to report
        return set()


def _lease_limit(git, main: str) -> float:
    try:
        return float(parse_config((git.show_bytes(f"{main}:{layout.CONFIG}") or b"").decode()).tasks.lease)
    except Exception:  # noqa: BLE001 - an unreadable config on main: the record's own bound applies
        return 7 * 86400.0


def _new_task_problem(git, rec, main: str, now: float) -> str | None:
    """Why a `reserved` record may not start a task: a lease over the config's, or a shard that is
    neither its contributor's own nor free to take (judged by the hub's clock, not the pusher's)."""
    limit = _lease_limit(git, main)
    if rec.lease > limit:
        return f"a task's lease is at most tasks.lease = {limit:g} s (main's config); this one asks {rec.lease:g} s"
    owner, _, shard_version = rec.shard.partition("@v")
    if owner == rec.contributor:
        if shard_version == str(rec.base_version):
            return None
        if not shard_version.isdigit() or int(shard_version) > rec.base_version:  # mallory@v1001 on v1
            return (f"a task's own shard is drawn from its base version: {owner}@v{rec.base_version}, "
                    f"not {rec.shard}")
        # an older shard of its own: a take, like anyone's (its task must have ended)

    found, _ = read_tasks(git)
    keyed = _keyed(git, main)
    held = [(r, t) for r, _, t in found.values() if r.shard == rec.shard]
    live = [r.id for r, t in held if r.state in LIVE and now <= t + r.lease]
    # anyone may write a keyless contributor's records: its cancel or failure frees the shard for others
    # only once the lease is over by the hub's clock (a forged cancel never hands another her shard)
    live += [r.id for r, t in held if r.state in ("cancelled", "failed") and r.contributor not in keyed
             and now <= t + r.lease]
    ended = [r.id for r, t in held if r.id not in live and (
        r.state in ("cancelled", "failed") or (r.state in LIVE and now > t + r.lease))]
    if live:
        return f"the shard {rec.shard} is held by task {live[0]} (its lease is live by the hub's clock)"
    if not ended:
        return (f"the shard {rec.shard} is {owner}'s: a task trains its own contributor's shard, or one "
                "whose task expired, was cancelled or failed (`woolf train --take TASK`)")
    return None
