"""ci/install.sh, as `woolf init` writes it, resolves GoodWoolf at the pinned commit with a real pip."""

from __future__ import annotations

import json

from tests.conftest import git
from tests.forges.test_install_source import ROOT, _run
from woolf.ledger.create import write_ci_files


def test_generated_install_script_resolves_goodwoolf_at_the_pinned_commit(tmp_path):
    repo = tmp_path / "goodwoolf"
    git("clone", "-q", "--no-local", str(ROOT), str(repo), cwd=tmp_path)  # this source at its HEAD commit
    sha = git("rev-parse", "HEAD", cwd=repo)
    led = tmp_path / "led"
    write_ci_files(led, f"git+file://localhost{repo}@{sha}")
    out = _run(led / "ci" / "install.sh", led, report=tmp_path / "report.json")
    assert out.returncode == 0, out.stdout + out.stderr
    (item,) = json.loads((tmp_path / "report.json").read_text())["install"]
    assert item["metadata"]["name"] == "goodwoolf" and item["requested_extras"] == ["s3"]
    assert item["download_info"]["vcs_info"]["commit_id"] == sha
