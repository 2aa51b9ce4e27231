"""Red-team findings on training tasks: nobody squats another's shard (F5) or expires another's
lease with one future-dated record (F10). Real hub with its hook; records crafted as an attacker would."""

from __future__ import annotations

import subprocess
import time

from woolf.git.repo import clean_env
from woolf.ledger.tasks import _new_id, list_tasks, reserve
from woolf.protocol.tasks import TaskRecord, task_ref


def _push_record(led, shard: str, lease: float, ahead: int = 0, who: str = "mallory"):
    """A `reserved` record pushed by hand (git commit-tree + git push), dated ``ahead`` s into the future."""
    head = led.head("refs/remotes/origin/main")
    rec = TaskRecord(_new_id(who), "reserved", who, head.version, head.commit, shard, 1, lease)
    date = f"{int(time.time()) + ahead} +0000"
    env = {**clean_env(), "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date, "GIT_AUTHOR_NAME": "x",
           "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x"}
    commit = subprocess.run(["git", "commit-tree", f"{head.commit}^{{tree}}", "-p", head.commit], cwd=led.root,
                            env=env, input=rec.message(), text=True, capture_output=True, check=True).stdout.strip()
    return subprocess.run(["git", "push", "origin", f"{commit}:{task_ref(rec.id)}"], cwd=led.root,
                          capture_output=True, text=True, env=clean_env())


def test_f5_nobody_reserves_anothers_shard_or_a_longer_lease(make_net):
    net = make_net(**{"tasks.lease": "3"})
    alice, mallory = net.clone("alice"), net.clone("mallory")
    out = _push_record(mallory, "alice@v0", 7 * 86400.0)
    assert out.returncode != 0 and "lease is at most tasks.lease = 3 s" in out.stderr, out.stderr
    out = _push_record(mallory, "alice@v0", 2.0)
    assert out.returncode != 0 and "the shard alice@v0 is alice's" in out.stderr, out.stderr
    for v in range(3):  # squatting alice's later shards is refused alike
        assert _push_record(mallory, f"alice@v{v + 1}", 1.0).returncode != 0
    assert _push_record(mallory, "mallory@v0", 2.0).returncode == 0  # her own shard: fine
    start = time.time()
    task = reserve(alice, "alice", alice.head("refs/remotes/origin/main"), "alice@v0", 8)  # not blocked
    reserved = time.time()  # alice's record is dated no later than this
    out = _push_record(mallory, "alice@v0", 2.0)
    if time.time() - start < 3:  # a machine so loaded that alice's lease already ran out proves nothing here
        assert out.returncode != 0 and "is held by task" in out.stderr, out.stderr
    time.sleep(max(0.0, reserved + 4.2 - time.time()))  # alice's lease runs out by the hub's clock: her shard may be taken
    assert _push_record(mallory, "alice@v0", 2.0).returncode == 0
    assert task.rec.shard == "alice@v0"


def test_f10_a_future_dated_record_expires_nobodys_lease(make_net):
    net = make_net(**{"tasks.lease": "120"})
    alice, mallory = net.clone("alice"), net.clone("mallory")
    task = reserve(alice, "alice", alice.head("refs/remotes/origin/main"), "alice@v0", 20)
    assert _push_record(mallory, "mallory@v0", 1.0, ahead=290).returncode == 0  # within the hub's skew
    mine = next(v for v in list_tasks(alice)[0] if v["id"] == task.rec.id)
    assert mine["state"] == "reserved", mine  # was: expired, "no heartbeat for 290 s"
    # mallory, her own clock set ahead, sees alice's task expired; the hub judges by its own clock
    out = _push_record(mallory, "alice@v0", 120.0)
    assert out.returncode != 0 and "is held by task" in out.stderr, out.stderr
