"""The demo's progress on a pipe: plain lines when something changes (rich's Live prints nothing there)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from woolf.demo.live import LiveView, Snapshot

pytestmark = pytest.mark.unit


def test_piped_progress_is_one_line_per_change():
    out = io.StringIO()
    console = Console(file=out, width=40)  # not a terminal: a pipe
    with LiveView(console) as view:
        view.show(Snapshot([], []), 1.0, 5.7, "woolf demo")
        view.show(Snapshot([], []), 2.0, 5.7, "woolf demo")  # nothing changed: no line
        view.show(Snapshot([], []), 3.0, 5.7, "draining")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines  # never wrapped at the console's width either
    assert "woolf demo: version 0, benchmark loss 5.7000, queue 0, merged 0, rejected 0" in lines[0]
    assert "draining" in lines[1]
