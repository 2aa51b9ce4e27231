"""The validator workflow and the test workflow, checked by actionlint and zizmor, and by hand."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import SMALL
from woolf.ledger.ledger import Ledger

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent


def _tool(name):
    path = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if path is None:
        pytest.skip(f"{name} is not installed (it comes with the dev extra)")
    return path


@pytest.fixture(scope="module")
def new_ledger(tmp_path_factory):
    root = tmp_path_factory.mktemp("wf")
    return Ledger.init(root / "led", storage=str(root / "s"), overrides=SMALL).root


def _workflow_dirs(new_ledger):
    return [ROOT / ".github" / "workflows", new_ledger / ".github" / "workflows"]


def test_actionlint_reports_nothing(new_ledger):
    for d in _workflow_dirs(new_ledger):
        files = sorted(str(p) for p in d.glob("*.yml"))
        proc = subprocess.run([_tool("actionlint"), *files], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_reports_nothing(new_ledger):
    for d in _workflow_dirs(new_ledger):
        proc = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", str(d)], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert "No findings to report" in proc.stdout + proc.stderr


def test_project_workflow_matches_the_template_init_writes(new_ledger):
    for rel in (".github/workflows/woolf-validate.yml", ".github/workflows/woolf-sweep.yml"):
        assert (ROOT / rel).read_text() == (new_ledger / rel).read_text()
    for script in ("evaluate.sh", "merge.sh", "install.sh", "sweep.sh"):
        # install.sh's WOOLF_SOURCE pins what woolf was installed from (forges/install_source.py)
        unpinned = lambda t: re.sub(r"(?m)^WOOLF_SOURCE='.*'$", "WOOLF_SOURCE=''", t)  # noqa: E731
        assert unpinned((ROOT / "ci" / script).read_text()) == unpinned((new_ledger / "ci" / script).read_text())


def test_workflow_hardening_by_hand(new_ledger):
    for d in _workflow_dirs(new_ledger):
        for path in d.glob("*.yml"):
            text = path.read_text()
            wf = yaml.safe_load(text)
            assert wf["permissions"] == {}, path
            for job in wf["jobs"].values():
                for step in job.get("steps", []):
                    uses = step.get("uses")
                    if uses:
                        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), uses
                        assert not uses.startswith("actions/cache")
                        if uses.startswith("actions/checkout"):
                            assert step["with"]["persist-credentials"] is False
                    assert "${{" not in step.get("run", ""), "expressions go through env:, never into run:"
    wf = yaml.safe_load((new_ledger / ".github/workflows/woolf-validate.yml").read_text())
    assert wf["jobs"]["evaluate"]["permissions"] == {"contents": "read", "pull-requests": "read"}
    assert "contents" in wf["jobs"]["merge"]["permissions"]
    # one merge group per PR: a burst of PRs never cancels another PR's pending merge
    assert "pull_request.number" in wf["jobs"]["merge"]["concurrency"]["group"]
    # a quorum (WOOLF_VALIDATORS): one evaluate leg and one vote job per validator, each vote job in
    # that validator's own environment (its key), in a group of its own so that votes run side by side
    vote, legs = wf["jobs"]["vote"], "fromJSON(vars.WOOLF_VALIDATORS"
    assert legs in wf["jobs"]["evaluate"]["strategy"]["matrix"]["validator"] and legs in vote["strategy"]["matrix"]["validator"]
    assert "environment" not in wf["jobs"]["evaluate"] and "environment" not in wf["jobs"]["merge"]
    assert vote["environment"] == "woolf-validator-${{ matrix.validator }}"
    assert "matrix.validator" in vote["concurrency"]["group"] and "pull_request.number" in vote["concurrency"]["group"]
    assert "WOOLF_VALIDATORS == ''" in wf["jobs"]["merge"]["if"] and "WOOLF_VALIDATORS != ''" in vote["if"]
    [step] = [s for s in vote["steps"] if "run" in s]
    assert step["run"] == "bash ci/merge.sh" and step["env"]["WOOLF_VALIDATOR"] == "${{ matrix.validator }}"
    sweep = yaml.safe_load((new_ledger / ".github/workflows/woolf-sweep.yml").read_text())
    assert sweep[True]["schedule"] and "workflow_dispatch" in sweep[True]  # YAML 1.1 reads `on:` as True
    assert "pull_request_target" not in sweep[True] and "pull_request" not in sweep[True]
    [step] = [s for s in sweep["jobs"]["sweep"]["steps"] if "run" in s]
    assert step["run"] == "bash ci/sweep.sh" and (new_ledger / "ci/sweep.sh").stat().st_mode & 0o111
    leg = sweep["jobs"]["sweep-vote"]
    assert leg["environment"] == "woolf-validator-${{ matrix.validator }}" and "WOOLF_VALIDATORS != ''" in leg["if"]
