"""A whole demo run from a directory holding a `woolf/` folder: its worker processes are not shadowed by it."""

from __future__ import annotations

from tests.conftest import SMALL
from tests.demo.test_workers import _shadow
from woolf.demo.run import DemoOptions, run_demo


def test_demo_from_a_directory_holding_a_woolf_folder_still_merges(tmp_path, monkeypatch):
    _shadow(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    r = run_demo(tmp_path / "demo", DemoOptions(participants=1, rounds=1, validators=1, steps=3, quick=True, report=False,
                 settings=dict(SMALL)))
    assert r.versions_merged + r.prs_rejected == 1, (tmp_path / "demo" / "logs" / "p1.log").read_text()
