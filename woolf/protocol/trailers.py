"""Commit-message trailers: the machine-readable part of every ledger commit.

Usage:
    msg = format_message("woolf: version 1", {"Woolf-Version": 1, "Woolf-Metrics": {"loss": 2.1}})
    subject, fields = parse_message(msg)    # fields["Woolf-Version"] == "1"

Values are one line each; dicts and lists are written as compact JSON. Every name is registered in
trailer_names.py (format_message refuses any other; a test checks that every name the code reads is).

Reading never raises on what an attacker wrote: an integer longer than
INT_MAX_DIGITS digits (Python refuses int() over 4300), JSON over
JSON_MAX_CHARS or nested deeper than JSON_MAX_DEPTH, or anything else that does
not parse reads as None, like a missing trailer.
"""

from __future__ import annotations

import json
import re

from woolf.protocol.safejson import depth
from woolf.protocol.trailer_names import known

INT_MAX_DIGITS = 30  # a version, a staleness, a time: never near this
JSON_MAX_CHARS = 1 << 20  # metrics, timings, scores of a large network
JSON_MAX_DEPTH = 32

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
    """Subject, optional body, then one trailer per field; every name is one of TRAILERS."""
    unknown = [k for k in fields if not known(k)]
    if unknown:
        raise ValueError(f"unregistered trailer names {unknown}: add them to woolf/protocol/trailer_names.py")
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
    if len(raw) > JSON_MAX_CHARS:
        return None
    try:
        doc = json.loads(raw)  # NaN stays readable: a validator may record a non-finite loss
    except (ValueError, RecursionError):
        return None
    return None if depth(doc, JSON_MAX_DEPTH) > JSON_MAX_DEPTH else doc


def int_field(fields: dict, key: str) -> int | None:
    raw = fields.get(key)
    if raw is None:
        return None
    digits = raw[1:] if raw.startswith("-") else raw
    if len(digits) > INT_MAX_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    return int(raw)


def float_field(fields: dict, key: str) -> float | None:
    raw = fields.get(key)
    if raw is None or len(raw) > 64:
        return None
    try:
        return float(raw)
    except ValueError:
        return None
