"""The kinds of cheating participant `woolf demo --adversaries` can add, without loading torch.

Usage:
    from woolf.demo.kinds import KINDS, parse_kinds
    parse_kinds("copycat,noise")  # ['copycat', 'noise']; an unknown kind raises UsageError
"""

from __future__ import annotations

from woolf.errors import UsageError

KINDS = ("free-rider", "copycat", "overfitter", "noise", "flooder", "lazy")


def parse_kinds(text: str) -> list[str]:
    """The comma-separated kinds in ``text``, each once, in order; refuses a kind not in KINDS."""
    kinds = list(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise UsageError(f"unknown adversaries {unknown}", hint=f"choose from {', '.join(KINDS)}")
    return kinds
