"""A task's submitted record rides the push that opens its PR (LocalForge.open's ``also``): one push,
one run of the hub's hooks; when that record lost a race, the PR is opened alone and the record follows."""

from __future__ import annotations

from woolf.git.repo import Git
from woolf.ledger import submission as submission_mod
from woolf.ledger.tasks import list_tasks
from woolf.participant import SubmitOptions, TrainOptions, submit, train


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
