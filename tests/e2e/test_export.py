"""`woolf export` through the console entry point: JSON out, a refusal in words."""

from __future__ import annotations

import json

from tests.conftest import run_cli


def test_cli_export(tmp_path, network):
    r = run_cli("export", "0", str(tmp_path / "o"), "--json", cwd=network.work.root)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == 0 and (tmp_path / "o" / "model.safetensors").is_file()
    r = run_cli("export", "0", str(tmp_path / "o"), cwd=network.work.root)
    assert r.returncode != 0 and "not empty" in r.stderr and "Traceback" not in r.stderr
