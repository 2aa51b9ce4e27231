"""Issue 14: training tasks (reserve, heartbeat, lease expiry by the origin's clock) and failure
handling under a quorum, with real processes where the issue asks for them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import key_for
from tests.crafting import force_ref
from woolf.errors import UsageError
from woolf.forges.local import LocalForge
from woolf.git.repo import clean_env
from woolf.ledger.tasks import list_tasks
from woolf.participant import SubmitOptions, TrainOptions, train
from woolf.protocol.tasks import task_ref
from woolf.protocol.trailers import format_message
from woolf.protocol.votes import vote_ref
from woolf.validator import Validator

ENV = {"PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "OMP_NUM_THREADS": "1"}


def _trainer(led, *args):
    return subprocess.Popen([sys.executable, "-m", "woolf", "train", "--device", "cpu", "--json", *args],
                            cwd=led.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **ENV})


def _wait_for(pred, timeout=120.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("timed out")


def _task_of(led, who):
    views, _ = list_tasks(led)
    return next((v for v in views if v["contributor"] == who), None)


def _push(led, *refspecs):
    return subprocess.run(["git", "push", "--porcelain", "origin", *refspecs], cwd=led.root,
                          capture_output=True, text=True, env=clean_env())


def test_killed_participant_lease_expires_by_origin_time_and_its_shard_is_taken(make_net):
    net = make_net(**{"tasks.lease": "3", "policy.min_improvement": "-10"})
    alice, bob = net.clone("alice"), net.clone("bob")
    proc = _trainer(alice, "--steps", "100000")
    try:
        first = _wait_for(lambda: (t := _task_of(bob, "alice")) and t["record"] in ("started", "heartbeat") and t)
        assert first["shard"] == "alice@v0" and first["state"] == "started"
        beat = _wait_for(lambda: (t := _task_of(bob, "alice")) and t["record"] == "heartbeat" and t, 30)
        assert beat["state"] == "started"  # heartbeats renew the lease while it trains
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # nobody's clock is read: until the origin sees a newer commit, the lease still looks live
    time.sleep(3.5)
    with pytest.raises(UsageError, match="its shard is not free"):
        train(bob, TrainOptions(steps=2, contributor="bob", seed=1, device="cpu", take=first["id"]))
    # bob trains his own shard: his records move the origin's clock, and alice's lease has run out
    train(bob, TrainOptions(steps=2, contributor="bob", seed=2, device="cpu"))
    view = _task_of(bob, "alice")
    assert view["state"] == "expired" and "no heartbeat" in view["detail"]
    done = train(bob, TrainOptions(steps=2, contributor="bob", seed=1, device="cpu", take=view["id"]))
    mine = next(v for v in list_tasks(bob)[0] if v["id"] == done["task"])
    assert mine["shard"] == "alice@v0" and mine["contributor"] == "bob"
    # nothing else is blocked: bob's PR merges
    from woolf.participant import submit

    sub = submit(bob, SubmitOptions(contributor="bob"))["id"]
    [verdict] = Validator(net.clone("val"), device="cpu").run()
    assert verdict.id == sub and verdict.accepted
    settled = next(v for v in list_tasks(bob)[0] if v["id"] == done["task"])
    assert settled["state"] == "settled" and settled["detail"] == "merged" and settled["submission"] == sub


def test_ctrl_c_cancels_the_task(make_net):
    net = make_net(**{"tasks.lease": "30"})
    alice = net.clone("alice")
    proc = _trainer(alice, "--steps", "100000")
    _wait_for(lambda: (t := _task_of(alice, "alice")) and t["record"] == "started")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    view = _task_of(alice, "alice")
    assert view["state"] == "cancelled" and "interrupted" in view["detail"]


def test_hub_refuses_clock_jumps_and_rewritten_leases(make_net):
    net = make_net(**{"tasks.lease": "60"})
    alice, mallory = net.clone("alice"), net.clone("mallory")
    train(alice, TrainOptions(steps=1, contributor="alice", device="cpu"))
    [view] = list_tasks(alice)[0]
    tip = view["tip"]
    list_tasks(mallory)  # fetches the task refs into mallory's clone

    def record(led, parent, state, date=None, key=None):
        msg = alice.git.message(tip).replace("Woolf-Task-State: started", f"Woolf-Task-State: {state}") \
            .replace("Woolf-Task-State: heartbeat", f"Woolf-Task-State: {state}")
        env = {**clean_env(), "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x",
               "GIT_COMMITTER_EMAIL": "x@x", **({"GIT_COMMITTER_DATE": date} if date else {})}
        args = ["git", "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit-tree", "-S"] if key else [
            "git", "commit-tree"]
        return subprocess.run([*args, f"{tip}^{{tree}}", "-p", parent], cwd=led.root, input=msg, text=True,
                              capture_output=True, env=env, check=True).stdout.strip()

    ref = task_ref(view["id"])
    jumped = record(alice, tip, "heartbeat", date=f"{int(time.time()) + 3600} +0000", key=key_for("alice"))
    out = _push(alice, f"{jumped}:{ref}")
    assert out.returncode != 0 and "off the hub's clock" in out.stderr
    forged = record(mallory, tip, "cancelled")  # another participant ends alice's task
    out = _push(mallory, f"{forged}:{ref}")
    assert out.returncode != 0 and "signed by alice's key" in out.stderr
    rewritten = record(mallory, view["base_commit"], "reserved", key=key_for("alice"))
    out = _push(mallory, f"+{rewritten}:{ref}")
    assert out.returncode != 0  # a rewrite is no fast-forward: refused (by git's own setting or the hook)
    # past the hub (an unprotected forge): junk under the task namespace is ignored with a reason
    force_ref(net.hub, mallory.root, view["base_commit"], "refs/woolf/task/not-a-task")
    views, bad = list_tasks(net.clone("observer"))
    assert [v["id"] for v in views] == [view["id"]]
    assert any("not-a-task" in r and "task id" in why for r, why in bad)


def test_validator_killed_mid_vote_storage_down_and_a_pr_without_quorum_expires(make_net):
    net = make_net(**{"validators.quorum": "2", "validators.vote_timeout": "3", "policy.min_improvement": "-10"})
    alice = net.clone("alice")
    from woolf.participant import submit

    train(alice, TrainOptions(steps=2, contributor="alice", device="cpu"))
    sub = submit(alice, SubmitOptions(contributor="alice"))["id"]
    # v1 is killed right after its vote is pushed: the vote stands, nothing else is left behind
    v1 = net.clone("v1")
    proc = subprocess.run([sys.executable, "-m", "woolf", "validate", "--all", "--device", "cpu"], cwd=v1.root,
                          env={**os.environ, **ENV, "WOOLF_FAILPOINT": "after-vote"}, capture_output=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL
    # storage is unreachable while v2 votes: no vote, the PR stays open (not rejected)
    storage, away = net.root / "storage", net.root / "storage.away"
    v2 = Validator(net.clone("v2"), device="cpu")
    v2.ledger.fetch()
    v2.ledger.weights_path(v2.ledger.head("refs/remotes/origin/main"))  # main's weights are cached; the delta is not
    shutil.move(storage, away)
    try:
        assert v2.run() == []
    finally:
        shutil.move(away, storage)
    assert LocalForge.for_ledger(v2.ledger).get(sub).state == "open"
    v2.state.retry_at.clear()
    [verdict] = v2.run()  # storage is back: v2's vote and v1's make the quorum
    assert verdict.accepted and verdict.version == 1
    # a second PR gets one vote: one validator below the quorum never expires it (issue 25, breach 1)
    train(alice, TrainOptions(steps=2, contributor="alice", device="cpu", seed=3))
    late = submit(alice, SubmitOptions(contributor="alice"))["id"]
    v3 = Validator(net.clone("v3"), device="cpu")
    assert v3.run() == []
    pr = LocalForge.for_ledger(v3.ledger).get(late)
    alone = v3.ledger.git.commit_tree(f"{pr.head}^{{tree}}", format_message("woolf: expired", {
        "Woolf-Verdict": "expired", "Woolf-Submission": late, "Woolf-Reason": "alone",
        "Woolf-Votes": [v3.ledger.git.rev_parse(vote_ref(late, "v3"))]}), [pr.head])
    out = _push(v3.ledger, f"{alone}:refs/woolf/pr/{late}/verdict")
    assert out.returncode != 0 and "names votes of 1 validator(s)" in out.stderr
    time.sleep(3.2)
    assert v3.run() == []
    # a second validator's vote disagrees (v1 invents its metrics): after vote_timeout the PR is expired
    from woolf.demo.dishonest import DishonestValidator

    [expired] = DishonestValidator(net.clone("v1b", key="v1"), device="cpu").run()
    obs = net.clone("observer")
    assert LocalForge.for_ledger(obs).get(late).state == "expired"
    task = next(v for v in list_tasks(obs)[0] if v["submission"] == late)
    assert task["state"] == "expired" and "no quorum" in task["detail"]
    from woolf.audit.recompute import audit

    assert audit(obs).ok
    out = subprocess.run([sys.executable, "-m", "woolf", "tasks", "--all", "--json"], cwd=obs.root,
                         env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120)
    states = sorted(t["state"] for t in json.loads(out.stdout)["tasks"])
    assert states == ["expired", "settled"], out.stderr
