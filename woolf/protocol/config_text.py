"""Writing a ledger config as TOML, and setting dotted keys in one (`woolf init --set`, `woolf config set`).

Usage:
    text = render_config(LedgerConfig(name="demo"))           # parse_config(text) == the config
    cfg = apply_overrides(cfg, {"policy.min_improvement": "-0.05"})   # re-validated
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from woolf.protocol.config import SECTIONS, LedgerConfig, parse_config, tomllib


def _toml_key(key: str) -> str:
    """A bare key when TOML allows one; quoted otherwise ("config.json" is one key, not two)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


def render_config(cfg: LedgerConfig) -> str:
    """TOML text for ``cfg``; parse_config(render_config(c)) == c."""
    lines = ["# GoodWoolf ledger configuration; see docs/protocol.md#configuration", ""]
    lines.append(f"name = {_toml_value(cfg.name)}")
    for section in SECTIONS:
        obj = getattr(cfg, section)
        lines += ["", f"[{section}]"]
        nested = []
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                nested.append((f.name, value))
            else:
                lines.append(f"{f.name} = {_toml_value(value)}")
        for name, value in nested:
            lines += ["", f"[{section}.{name}]"]
            for g in dataclasses.fields(value):
                lines.append(f"{g.name} = {_toml_value(getattr(value, g.name))}")
    return "\n".join(lines) + "\n"


def apply_overrides(cfg: LedgerConfig, overrides: dict[str, str]) -> LedgerConfig:
    """Set dotted keys ("policy.min_improvement" = "-0.05") and re-validate the result."""
    text = render_config(cfg)
    data = tomllib.loads(text)
    for key, raw in overrides.items():
        *path, last = key.split(".")
        node = data
        for part in path:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        try:
            node[last] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            node[last] = raw  # a bare word is a string
    lines = []

    def emit(prefix: str, table: dict) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict) or k == "params"}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in scalars.items())
        for k, v in table.items():
            if isinstance(v, dict) and k != "params":
                emit(f"{prefix}.{k}" if prefix else k, v)

    emit("", data)
    return parse_config("\n".join(lines) + "\n", "--set")
