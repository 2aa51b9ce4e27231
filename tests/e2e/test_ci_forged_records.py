"""Issue 37, breach 6, on the local GitHub server: a forged evaluate artifact no longer closes an honest
PR, and the scores of an accepted record are measured again by the privileged apply job."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import git
from tests.e2e.test_github import github_ledger
from woolf.errors import UsageError
from woolf.ledger.ledger import Ledger
from woolf.ledger.verdicts import merged_records
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.validator import Validator
from woolf.validator.ci import apply_record, evaluate_pr


@pytest.fixture
def gh_world(tmp_path, monkeypatch):
    with github_ledger(tmp_path, monkeypatch, {"policy.min_improvement": "-0.02"}) as (gh, store, hub, fork):
        git("clone", "-q", str(hub), str(tmp_path / "alice"), cwd=tmp_path)
        git("remote", "add", "fork", str(fork), cwd=tmp_path / "alice")
        (tmp_path / "alice" / ".dvc" / "config.local").write_text(
            f"['remote \"mine\"']\n    url = {tmp_path / 'alice-storage'}\n")
        git("clone", "-q", str(hub), str(tmp_path / "val"), cwd=tmp_path)
        alice = Ledger.open(tmp_path / "alice")
        train(alice, TrainOptions(steps=20, contributor="alice"))
        sub = submit(alice, SubmitOptions(contributor="alice", delta_url_base=store.url, delta_remote="mine"))
        val = Ledger.open(tmp_path / "val")
        record = evaluate_pr(Validator(val, device="cpu", forge_kind="github"), "1")
        assert record["accepted"] and record["id"] == sub["id"], record["reason"]
        yield gh, hub, val, record
        assert gh.errors == [], "\n".join(gh.errors)


def _apply(val, record):
    return apply_record(Validator(Ledger.open(val.root), device="cpu", forge_kind="github"), record)


def test_a_forged_rejection_never_closes_an_honest_pr(gh_world):
    gh, hub, val, record = gh_world
    main = git("rev-parse", "main", cwd=hub)
    forged = {**copy.deepcopy(record), "accepted": False, "candidate_sha256": None,
              "reason": "the delta is garbage (forged by the evaluate runner)"}
    with pytest.raises(UsageError, match="this job's own evaluation accepts"):
        _apply(val, forged)  # main: the PR was closed with the forged reason
    assert gh.pulls["owner/ledger"][1]["closed"] is False
    assert git("rev-parse", "main", cwd=hub) == main
    done = _apply(val, record)  # the honest record still applies
    assert done.accepted and done.version == 1


def test_the_scores_of_an_accepted_record_are_measured_again(gh_world):
    gh, hub, val, record = gh_world
    assert record["scores"] and record["scores"]["assigned"] < 5
    forged = copy.deepcopy(record)
    forged["scores"].update(assigned=9.5, difference=9.0)  # the leaderboard would read these
    done = _apply(val, forged)
    assert done.accepted, done.reason
    val.fetch()
    [rec] = merged_records(val, ref="refs/remotes/origin/main")[:1]
    assert rec.scores["assigned"] == pytest.approx(record["scores"]["assigned"], abs=1e-3)  # main: 9.5
    assert done.scores["assigned"] != 9.5
