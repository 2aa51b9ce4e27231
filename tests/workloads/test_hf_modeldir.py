"""A model directory woolf cannot read is named for what it is (woolf/workloads/hf/modeldir.py): a GGUF one."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")


@pytest.mark.parametrize("as_file", [False, True])
def test_a_gguf_checkpoint_is_diagnosed_as_gguf_with_its_conversion(tmp_path, cli, as_file):
    d = tmp_path / "smol-gguf"
    d.mkdir()
    (d / "smollm2-135m-instruct-q8_0.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
    (d / "convert_hf_to_gguf.py").write_text("print('a conversion script shipped beside it')\n")
    (d / "README.md").write_text("a model card\n")
    weights = d / "smollm2-135m-instruct-q8_0.gguf" if as_file else d
    r = cli("init", "led", "--unsigned", "--workload", "transformers", "--weights", str(weights), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "holds a GGUF checkpoint (smollm2-135m-instruct-q8_0.gguf)" in r.stderr, r.stderr
    assert "Python code" not in r.stderr and "gguf_file='smollm2-135m-instruct-q8_0.gguf'" in r.stderr
    assert not (tmp_path / "led").exists()
