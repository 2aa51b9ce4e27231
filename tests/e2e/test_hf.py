"""`woolf init --workload transformers` through the console entry point: a refusal, then a ledger."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from tests.workloads.hf import test_workload  # noqa: E402
from woolf.ledger.ledger import Ledger  # noqa: E402

gpt2_dir, _copy = test_workload.gpt2_dir, test_workload._copy  # the module's fixture: a tiny local model directory


def test_cli_init_and_refusal(tmp_path, gpt2_dir, cli):
    bad = _copy(gpt2_dir, tmp_path / "bad")
    (bad / "tokenizer.json").unlink()
    r = cli("init", "led", "--unsigned", "--workload", "transformers", "--weights", str(bad), cwd=tmp_path)
    assert r.returncode == 2 and "no tokenizer.json" in r.stderr and "Traceback" not in r.stderr
    r = cli("init", "led", "--unsigned", "--workload", "transformers", "--weights", str(gpt2_dir), "--json",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == 0
    assert Ledger.open(tmp_path / "led").config.workload.name == "transformers"
