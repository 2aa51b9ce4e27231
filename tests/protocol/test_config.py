"""The ledger config (woolf/protocol/config.py): round trip, defaults, errors that name the file, field and allowed values."""

from __future__ import annotations

import pytest

from woolf.errors import ConfigError
from woolf.protocol.config import LedgerConfig, parse_config
from woolf.protocol.config_text import render_config

pytestmark = pytest.mark.unit


def test_config_roundtrip_and_defaults():
    cfg = LedgerConfig(name="demo")
    assert parse_config(render_config(cfg)) == cfg
    assert cfg.merge.staleness.kind == "inverse"


@pytest.mark.parametrize("text,needle", [
    ("bogus = 1\n", "unknown section or key 'bogus'"),
    ("[merge]\nalpha = 1\n", "unknown key 'merge.alpha'"),
    ("[merge]\nalpha_base = -1\n", "'merge.alpha_base'"),
    ("[merge]\nalpha_base = 'x'\n", "must be a float"),
    ("[merge.staleness]\nkind = 'cubic'\n", "inverse, polynomial, hinge, constant"),
    ("[policy]\ndirection = 'up'\n", "'minimize' or 'maximize'"),
    ("[limits]\nmax_delta_bytes = 0\n", "limits.max_delta_bytes"),
    ("[merge\n", "not valid TOML"),
])
def test_config_errors_name_file_field_and_allowed(text, needle):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "ledger/woolf.toml")
    assert needle in str(err.value)
    assert "ledger/woolf.toml" in str(err.value)


def test_shipped_example_config_parses():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "ledger" / "woolf.toml").read_text()
    assert parse_config(text) == LedgerConfig(name="example")
