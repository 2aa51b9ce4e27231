"""Download times kept across passes and processes, and keyless PRs served fewest tries first
(woolf/validator/downloads.py; the replay of the starved keyless PR: tests/e2e/test_keyless_budget.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from woolf.validator.downloads import FILE, DownloadTimes, fewest_tries_first, spent_key

pytestmark = pytest.mark.unit


def _pr(i: str, sha: str = "s"):
    return SimpleNamespace(id=i, submission={"delta": {"sha256": sha}})


def test_times_survive_a_new_process_and_a_new_delta_starts_from_zero(tmp_path):
    times = DownloadTimes.open(tmp_path)
    times.record(spent_key("a", "s"), 1.5)
    times.record(spent_key("a", "s"), 2.0)
    again = DownloadTimes.open(tmp_path)  # the next `woolf validate --all`
    assert again[spent_key("a", "s")] == pytest.approx(3.5) and again.tries[spent_key("a", "s")] == 2
    assert again.get(spent_key("a", "other"), 0.0) == 0.0  # the PR's head moved to another delta
    again.keep([_pr("b")])  # a is no longer open
    assert dict(DownloadTimes.open(tmp_path)) == {}


def test_a_damaged_file_starts_afresh(tmp_path):
    path = tmp_path / ".woolf" / "validator" / FILE
    path.parent.mkdir(parents=True)
    path.write_text('{"a s": {"seconds": "NaN"}, "b s": {"seconds": -1}, "c s": [1], "d s": {"seconds": 2}}')
    assert dict(DownloadTimes.open(tmp_path)) == {"d s": 2.0}
    path.write_text("not json")
    assert dict(DownloadTimes.open(tmp_path)) == {}


def test_fewest_tries_go_first_and_ties_keep_the_queue_order(tmp_path):
    times = DownloadTimes.open(tmp_path)
    slow1, slow2, honest, later = _pr("slow1"), _pr("slow2"), _pr("honest"), _pr("later")
    times.record(spent_key("slow1", "s"), 30.0)  # cut by the budget once
    order = fewest_tries_first([slow1, slow2, honest, later], times)
    assert [p.id for p in order] == ["slow2", "honest", "later", "slow1"]
    times.record(spent_key("honest", "s"), 2.0)  # tried with 2 s left: one try, as the slow ones
    times.record(spent_key("slow2", "s"), 30.0)
    order = fewest_tries_first([slow1, slow2, honest, later], times)
    assert [p.id for p in order] == ["later", "slow1", "slow2", "honest"]  # a later PR's one try first, then
    # every PR that had one, in queue order: a flood of new PRs goes first only once per PR it pushed
