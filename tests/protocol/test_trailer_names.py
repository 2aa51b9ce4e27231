"""One registry of trailer names: every `Woolf-*` name the code writes or reads is in it, and
format_message refuses any other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from woolf.protocol.trailer_names import TRAILERS, known
from woolf.protocol.trailers import format_message, parse_message

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "woolf"
NAME = re.compile(r"""["'](Woolf-[A-Za-z0-9-]+)["']""")


def _names_in_code() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        if f.name == "trailer_names.py":
            continue
        for name in NAME.findall(f.read_text()):
            found.setdefault(name, []).append(str(f.relative_to(PACKAGE.parent)))
    return found


def test_every_name_in_the_code_is_registered():
    unregistered = {n: where for n, where in _names_in_code().items() if not known(n)}
    assert unregistered == {}


def test_every_registered_name_is_used():
    assert sorted(set(TRAILERS) - set(_names_in_code())) == []


def test_registry_entries_are_well_formed():
    kinds = {"int", "float", "json", "text", "sha256"}
    carriers = {"version", "verdict", "vote", "task", "submission", "receipt", "challenge", "answer"}
    for name, t in TRAILERS.items():
        assert re.fullmatch(r"Woolf-[A-Z][A-Za-z0-9]*(-[A-Z0-9][A-Za-z0-9]*)*", name), name
        assert t.kind in kinds and set(t.carriers) <= carriers and t.carriers and t.meaning, name


def test_format_message_refuses_an_unregistered_name_and_writes_nothing_partial():
    with pytest.raises(ValueError, match="Woolf-Verison"):
        format_message("woolf: version 1", {"Woolf-Version": 1, "Woolf-Verison": 1})
    with pytest.raises(ValueError, match="unregistered"):
        format_message("x", {"Woolf-Typo": None})  # refused even when it would be skipped


def test_reading_still_takes_any_name_an_attacker_wrote():
    """Readers parse what is there (a hostile commit may carry anything); the registry binds writers."""
    _, fields = parse_message("subject\n\nWoolf-Whatever: 1\nWoolf-Version: 2\n")
    assert fields == {"Woolf-Whatever": "1", "Woolf-Version": "2"}
