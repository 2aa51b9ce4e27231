"""Layer 7, a role: what happened, for people: the HTML report, leaderboard, credit, validators.

Modules: build.py (HTML/PNG/markdown report), board.py (ratings and credit), scoring.py (their
report section), validators.py (`woolf validators`), story.py (what happened, in words).
Imports no other role.

Usage:
    from woolf.report.build import build_report
"""
