"""`woolf export` (woolf/cli/history/export.py): what it prints."""

from __future__ import annotations

import json


def test_export_prints_every_file_it_wrote(network, tmp_path, cli):
    r = cli("export", "0", str(tmp_path / "o"), cwd=network.work.root)
    assert r.returncode == 0 and "woolf-export.json" in r.stdout, r.stderr
    assert json.loads((tmp_path / "o" / "woolf-export.json").read_text())["version"] == 0
