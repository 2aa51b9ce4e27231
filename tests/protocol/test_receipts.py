"""protocol/receipts.py, the hub's receipt log and its one reader: each PR id's receipt number, position and
receipt commit (the queue's order, the re-training draw), and the ids recorded as signed."""

from __future__ import annotations

import subprocess

import pytest

from tests.gitobjects import git_out
from woolf.git.repo import Git
from woolf.protocol.receipts import RECEIPTS, read_receipts, read_signed, receipt_commit
from woolf.protocol.trailers import format_message

pytestmark = pytest.mark.unit

A, B, C = (f"20261205T000000000Z-{who}-0123abcd" for who in ("alice", "bob", "carol"))


def _receipt(repo, number: int, ids: list[str], signed: list[str]) -> str:
    """One receipt commit as the hub's post-receive hook appends it (woolf/hub/receipts.py)."""
    tip = subprocess.run(["git", "rev-parse", "-q", "--verify", RECEIPTS], cwd=repo, capture_output=True,
                         text=True).stdout.strip()
    message = format_message(f"woolf: hub receipt {number}", {"Woolf-Receipt": number, "Woolf-Received": ids,
                                                               "Woolf-Signed": signed})
    empty = git_out(repo, "mktree", input=b"")
    commit = git_out(repo, "commit-tree", empty, *(["-p", tip] if tip else []), "-F", "-", input=message.encode())
    git_out(repo, "update-ref", RECEIPTS, commit)
    return commit


def test_the_first_receipt_of_an_id_gives_its_order_and_its_commit(tmp_path):
    git_out(tmp_path, "init", "-q")
    first = _receipt(tmp_path, 1, [A, B], [B])
    second = _receipt(tmp_path, 2, [C, A, "not an id"], [])  # A pushed again: its first receipt counts
    git = Git(tmp_path)
    assert read_receipts(git) == {A: (1, 0), B: (1, 1), C: (2, 0)}
    assert (receipt_commit(git, A), receipt_commit(git, B), receipt_commit(git, C)) == (first, first, second)
    assert receipt_commit(git, "not an id") is None and read_signed(git) == {B}


def test_without_a_receipt_log_no_pr_has_a_receipt(tmp_path):
    git_out(tmp_path, "init", "-q")
    git = Git(tmp_path)
    assert read_receipts(git) == {} and receipt_commit(git, A) is None and read_signed(git) == set()
