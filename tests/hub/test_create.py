"""The post-receive hook's shell filter (woolf/hub/create.py RECEIPT_HOOK): Python starts only for a push
that may create a PR head, and every push that does create one reaches the receipt code."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from woolf.hub.create import RECEIPT_HOOK

pytestmark = pytest.mark.unit

Z, A, B = "0" * 40, "a" * 40, "b" * 40
_HEAD = re.compile(r"^refs/woolf/pr/([^/]+)/head$")  # what woolf/hub/receipts.py records


def creates_pr(lines: list[str]) -> bool:
    return any(p[0] == Z and p[1] != Z and _HEAD.match(p[2]) for p in (ln.split() for ln in lines))


CASES = [
    [f"{Z} {A} refs/woolf/pr/20261205T0000Z-alice-0123abcd/head"],
    [f"{A} {B} refs/heads/main", f"{Z} {A} refs/woolf/pr/x-1/verdict"],  # a merge
    [f"{Z} {A} refs/woolf/pr/x-1/votes/val"],
    [f"{A} {B} refs/woolf/pr/x-1/head"],  # moved, not created: the pre-receive hook refuses it anyway
    [f"{Z} {A} refs/woolf/task/t-1"],
    [f"{A} {B} refs/woolf/task/t-1", f"{Z} {B} refs/woolf/pr/y-2/head", f"{Z} {A} refs/woolf/pr/y-2/comments"],
    [f"{Z} {A} refs/woolf/pr/x-1/comments", f"{A} {B} refs/heads/main"],  # "/head" only across lines
    [f"{Z} {A} refs/heads/woolf/x-1"],
]


@pytest.mark.parametrize("lines", CASES)
def test_python_starts_exactly_when_a_line_may_create_a_pr_head(tmp_path: Path, lines):
    seen = tmp_path / "seen"
    fake = tmp_path / "python"  # stands in for Python: keeps what it was given on stdin
    fake.write_text(f"#!/bin/sh\ncat > {shlex.quote(str(seen))}\n")
    fake.chmod(0o755)
    hook = tmp_path / "post-receive"
    hook.write_text(RECEIPT_HOOK.format(python=shlex.quote(str(fake)), code="unused"))
    hook.chmod(0o755)
    given = "\n".join(lines) + "\n"
    subprocess.run([str(hook)], input=given.encode(), check=True)
    assert seen.exists() == creates_pr(lines)
    if seen.exists():
        assert seen.read_text() == given  # every line reaches the receipt code, unchanged
