"""Commit-message trailers: the machine-readable part of every ledger commit.

Usage:
    msg = format_message("woolf: version 1", {"Woolf-Version": 1, "Woolf-Metrics": {"loss": 2.1}})
    subject, fields = parse_message(msg)    # fields["Woolf-Version"] == "1"

Values are one line each; dicts and lists are written as compact JSON.
"""

from __future__ import annotations

import json
import re

_KEY = re.compile(r"^(Woolf-[A-Za-z0-9-]+): (.*)$")


def _value(v) -> str:
    if isinstance(v, (dict, list)):
        text = json.dumps(v, sort_keys=True, separators=(",", ":"))
    elif isinstance(v, float):
        text = repr(v)
    else:
        text = str(v)
    if "\n" in text or "\r" in text:
        raise ValueError("trailer values must be one line")
    return text


def format_message(subject: str, fields: dict, body: str = "") -> str:
    subject = " ".join(subject.split())
    lines = [subject, ""]
    if body.strip():
        lines += [body.strip(), ""]
    lines += [f"{k}: {_value(v)}" for k, v in fields.items() if v is not None]
    return "\n".join(lines) + "\n"


def parse_message(message: str) -> tuple[str, dict[str, str]]:
    """Subject line and the Woolf-* trailers of the last paragraph."""
    text = message.strip("\n")
    subject = text.split("\n", 1)[0]
    cut = text.rfind("\n\n")
    fields: dict[str, str] = {}
    if cut >= 0:
        for line in text[cut + 2:].split("\n"):
            key, sep, value = line.partition(": ")
            if sep and key.startswith("Woolf-") and _KEY.match(line):
                fields[key] = value
    return subject, fields


def json_field(fields: dict, key: str):
    raw = fields.get(key)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return None


def int_field(fields: dict, key: str) -> int | None:
    raw = fields.get(key)
    if raw is None:
        return None
    digits = raw[1:] if raw.startswith("-") else raw
    return int(raw) if digits.isascii() and digits.isdigit() else None


def float_field(fields: dict, key: str) -> float | None:
    raw = fields.get(key)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None
