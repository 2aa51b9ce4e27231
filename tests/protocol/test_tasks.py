"""Task records (woolf/protocol/tasks.py) with attacker text: a separator or a terminal escape is refused by
the hook and skipped by readers, the other tasks read."""

from __future__ import annotations

import json

from tests.crafting import push, refused
from tests.hostile_corpus import push_ref
from woolf.ledger.tasks import _new_id
from woolf.protocol.tasks import TaskRecord, read_tasks, task_ref

EVIL = "\x1b]0;PWNED\x1b\\\x1b[2J"  # OSC set-title, then clear screen


def _task_commits(led, reason: str | None, subject_tail: str = "") -> tuple[str, str, str]:
    """(task id, reserved record, cancelled record with ``reason``) as mallory would push them."""
    head = led.head("refs/remotes/origin/main")
    rec = TaskRecord(_new_id("mallory"), "reserved", "mallory", head.version, head.commit, "mallory@v0", 2, 600.0)
    first = rec.message().replace("\n", f"{subject_tail}\n", 1)
    c1 = led.git.out("commit-tree", f"{head.commit}^{{tree}}", "-p", head.commit, input=first.encode())
    rec.state, rec.reason = "cancelled", reason
    c2 = led.git.out("commit-tree", f"{head.commit}^{{tree}}", "-p", c1, input=rec.message().encode())
    return rec.id, c1, c2


def test_f2_f9_task_records_with_separators_or_escapes_are_refused_and_skipped(network, cli):
    mallory, alice = network.clone("mallory"), network.clone("alice")
    split_id, split, _ = _task_commits(mallory, None, " \x1e boom")
    assert refused(push(mallory, f"{split}:{task_ref(split_id)}"), "a control character")
    esc_id, reserved, cancelled = _task_commits(mallory, f"bye {EVIL}")
    assert push(mallory, f"{reserved}:{task_ref(esc_id)}").returncode == 0  # a plain record lands
    assert refused(push(mallory, f"{cancelled}:{task_ref(esc_id)}"), "a control character")
    ok_id, ok, _ = _task_commits(mallory, None)
    assert push(mallory, f"{ok}:{task_ref(ok_id)}").returncode == 0
    # where no hook stopped them: skipped and reported, the other tasks read
    push_ref(mallory, split, task_ref(split_id))
    push_ref(mallory, cancelled, task_ref(esc_id))
    alice.git.fetch("origin", f"+{task_ref('*')}:{task_ref('*')}")
    found, bad = read_tasks(alice.git)
    assert sorted(found) == [ok_id]
    assert sorted(r for r, why in bad if "control character" in why) == sorted([task_ref(split_id), task_ref(esc_id)])
    listing = cli("tasks", "--all", "--json", cwd=alice.root)
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert [t["id"] for t in json.loads(listing.stdout)["tasks"]] == [ok_id]
    shown = cli("tasks", "--all", cwd=alice.root)
    assert shown.returncode == 0 and "\x1b" not in shown.stdout + shown.stderr, shown.stderr[-2000:]
