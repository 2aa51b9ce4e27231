"""Layer 7, a role: what happened, for people: the HTML report, leaderboard, credit, validators.

Modules: build.py (HTML/PNG/markdown report), board.py (ratings and credit), scoring.py (their
report section), validators.py (`woolf validators`), story.py (what happened, in words).
Imports no other role.

Usage:
    from woolf.report import build_report, credit, leaderboard, validators_report
    build_report(ledger, Path("report"))   # loads matplotlib and torch when first asked for
"""

from woolf.report.board import credit, leaderboard
from woolf.report.validators import validators_report

__all__ = ["build_report", "credit", "leaderboard", "validators_report"]


def __getattr__(name: str):
    if name == "build_report":
        from woolf.report.build import build_report  # deferred: loads torch, matplotlib

        return build_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
