"""A k-of-n quorum of validators: signed votes under each PR, their tally, and who disagreed.

Modules: votes.py (a vote commit: cast, parse, verify), check.py (does a version or a rejection
rest on a quorum: hub, trust and audit), voter.py (the validator's side: vote, tally, settle),
report.py (`woolf validators`: each validator's votes and agreement). The arithmetic of agreement
is woolf/core/quorum.py. Importing this package loads no torch (the hub's hook uses check.py).
"""
