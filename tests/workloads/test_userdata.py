"""`woolf train --data DIR` (woolf/workloads/userdata.py): text files only, hidden ones and binaries skipped
and named, the path kept private."""

from __future__ import annotations

import pytest

from woolf.errors import UsageError
from woolf.workloads.userdata import user_texts


def _tree(root):
    (root / ".git" / "objects" / "ab").mkdir(parents=True)
    (root / ".git" / "objects" / "ab" / "cdef").write_bytes(b"x\x9c\x00\x01binary zlib")
    (root / ".env").write_text("TOKEN=secret\n")
    (root / "docs").mkdir()
    (root / "docs" / "a.txt").write_text("Q: hi?\nA: hello.\n" * 5)
    (root / "docs" / "b.md").write_text("# héllo ünïcode\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    return root


@pytest.mark.unit
def test_data_dir_skips_hidden_paths_and_binaries_and_names_them(tmp_path):
    data = user_texts(_tree(tmp_path / "d"))
    assert data.source == "private"
    assert [p.rsplit("/", 2)[-2:] for p in data.files] == [["docs", "a.txt"], ["docs", "b.md"]]
    assert data.texts[1] == "# héllo ünïcode\n".encode()
    assert data.skipped == [".git/ (hidden)", ".env (hidden)", "latin1.txt (not text)", "logo.png (not text)"]


@pytest.mark.unit
def test_data_that_is_not_text_or_too_short_is_refused_in_one_line(tmp_path):
    (tmp_path / "img.png").write_bytes(b"\x89PNG\x00\x00")
    with pytest.raises(UsageError, match="not text; woolf trains on text files"):
        user_texts(tmp_path / "img.png")
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / ".hidden.txt").write_text("a lot of text " * 100)
    with pytest.raises(UsageError, match=r"not enough text .*0 bytes in 0 file\(s\).*skipped 1: .hidden.txt"):
        user_texts(tmp_path / "only", min_bytes=10)
    with pytest.raises(UsageError, match="no such file"):
        user_texts(tmp_path / "nowhere")


def test_train_says_what_data_dir_left_out(network, tmp_path, cli):
    r = cli("train", "--data", str(_tree(tmp_path / "d")), "--steps", "2", cwd=network.clone("alice").root)
    assert r.returncode == 0, r.stderr
    assert ("note: --data left out 4 path(s) that are hidden or not UTF-8 text: .git/ (hidden), .env (hidden), "
            "latin1.txt (not text), logo.png (not text)") in r.stderr
