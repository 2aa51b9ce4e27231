"""What a PR publishes (woolf/ledger/submission.py): nothing that says where a participant keeps its files."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import git
from woolf.git.repo import Git
from woolf.ledger import submission as submission_mod
from woolf.ledger.submission import public
from woolf.ledger.tasks import list_tasks
from woolf.participant import SubmitOptions, TrainOptions, submit, train


@pytest.mark.unit
def test_public_turns_every_place_on_the_submitters_machine_into_private():
    summary = {"data": "/home/ann/qa.txt", "command": "/home/ann/venv/bin/python", "steps": 4, "loss": 1.5,
               "note": "read ~/notes and C:\\Users\\ann", "url": "file:///srv/x", "nested": [{"p": "x=/etc/y"}],
               "shard": "shard:alice@v3", "domain": "domain 1/3:alice@v0", "optimizer": "resumed at step 10",
               "/abs/as/key": 1}
    out = public(summary)
    assert out == {"data": "private", "command": "private", "steps": 4, "loss": 1.5, "note": "private",
                   "url": "private", "nested": [{"p": "private"}], "shard": "shard:alice@v3",
                   "domain": "domain 1/3:alice@v0", "optimizer": "resumed at step 10"}
    assert public(None) is None


def _everything_pushed(hub) -> bytes:
    """Every object in the hub, as git stores it (trees, commits, blobs: contents, messages, paths)."""
    ids = git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)", cwd=hub).split()
    return subprocess.run(["git", "cat-file", "--batch"], cwd=hub, input="\n".join(ids).encode(),
                          capture_output=True, check=True).stdout


def test_a_data_path_flow_pushes_no_path_of_the_submitters_machine(network, tmp_path, cli):
    """`woolf train --data /abs/path` then `woolf submit`: submission.json recorded the absolute path of the
    private data file; no object pushed to the hub, and no object in storage, may name it."""
    secret = tmp_path / "home-of-ann-7f3" / "notes"
    (secret / "deep").mkdir(parents=True)
    (secret / "qa.txt").write_text("Q: what does Ann like?\nA: Ann likes figs.\n" * 40)
    (secret / "deep" / "more.md").write_text("# notes\n" + "Ann keeps her figs cold.\n" * 40)
    alice = network.clone("alice")
    r = cli("train", "--data", str(secret), "--steps", "3", cwd=alice.root)
    assert r.returncode == 0, r.stderr
    r = cli("submit", "-m", "my notes", cwd=alice.root)
    assert r.returncode == 0, r.stderr
    r = cli("validate", cwd=network.clone("val").root)
    assert r.returncode == 0, r.stderr
    pushed = _everything_pushed(network.hub)
    assert b'"data": "private"' in pushed and b'"files": 2' in pushed  # what is kept: private, a count
    for needle in ("home-of-ann-7f3", str(alice.root)):  # (tmp_path itself: the maintainer's storage URL)
        assert needle.encode() not in pushed, needle
    stored = b"".join(p.read_bytes() for p in (tmp_path / "storage").rglob("*") if p.is_file())
    assert b"home-of-ann-7f3" not in stored


# A task's submitted record rides the push that opens its PR (LocalForge.open's ``also``): one push, one run
# of the hub's hooks; when that record lost a race, the PR is opened alone and the record follows.
def _pushes(monkeypatch) -> list:
    seen = []
    real = Git.push

    def counting(self, remote, updates, leases):
        seen.append([ref for _, ref in updates])
        return real(self, remote, updates, leases)

    monkeypatch.setattr(Git, "push", counting)
    return seen


def test_the_submitted_record_and_the_pr_land_in_one_push(network, monkeypatch):
    alice = network.clone("alice")
    done = train(alice, TrainOptions(steps=5, contributor="alice", device="cpu"))
    pushes = _pushes(monkeypatch)
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert len(pushes) == 1 and pushes[0] == [f"refs/woolf/pr/{pr['id']}/head", f"refs/woolf/task/{done['task']}"]
    [view] = [v for v in list_tasks(network.clone("observer"))[0] if v["id"] == done["task"]]
    assert view["record"] == "submitted" and view["submission"] == pr["id"]  # as the hub has it


def test_a_record_that_lost_its_race_does_not_cost_the_pr(network, monkeypatch):
    alice = network.clone("alice")
    done = train(alice, TrainOptions(steps=5, contributor="alice", device="cpu"))
    real = submission_mod.submitted_update

    def stale(ledger, task_id, sub_id):  # the task ref moved on the hub after this clone read it
        commit, ref, _ = real(ledger, task_id, sub_id)
        return commit, ref, "0" * 39 + "1"

    monkeypatch.setattr(submission_mod, "submitted_update", stale)
    pushes = _pushes(monkeypatch)
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert [len(p) for p in pushes] == [2, 1, 1]  # together (lost), the PR alone, the record alone
    [view] = [v for v in list_tasks(network.clone("observer"))[0] if v["id"] == done["task"]]
    assert view["record"] == "submitted" and view["submission"] == pr["id"]
