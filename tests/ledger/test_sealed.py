"""Bytes sealed to one validator (woolf/ledger/sealed.py): only its key opens them, and any change is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from woolf.ledger.sealed import open_sealed, seal_to, validator_key

pytestmark = pytest.mark.unit


def test_only_the_validator_that_asked_opens_its_samples(tmp_path):
    mine, other = SimpleNamespace(root=tmp_path / "a"), SimpleNamespace(root=tmp_path / "b")
    private, public = validator_key(mine)
    assert validator_key(mine) == (private, public)  # made once, kept
    blob = seal_to(public, b"the windows of segment 3")
    assert b"windows" not in blob and open_sealed(private, blob) == b"the windows of segment 3"
    with pytest.raises(ValueError, match="not sealed to this validator's key"):
        open_sealed(validator_key(other)[0], blob)
    changed = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(ValueError):
        open_sealed(private, changed)
    with pytest.raises(ValueError, match="too short"):
        open_sealed(private, b"x")
    assert seal_to(public, b"same") != seal_to(public, b"same")  # a fresh key and nonce every time
