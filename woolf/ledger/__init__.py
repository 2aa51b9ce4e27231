"""Layer 6: the Ledger object and what every role reads through it.

Modules: ledger.py (open, log, show, checkout, status, fetch, pull), create.py (`woolf init`),
submission.py (the one path that opens a PR), trust.py (main's head verified before building),
change.py (maintainer config and signer changes), benchmark.py (the validator-private benchmark),
verdicts.py (the verdict history from git alone), tasks.py (training tasks and leases),
retention/ (deltas, gc, rebuild).

Usage:
    from woolf.ledger import Ledger
    ledger = Ledger.open(".")
"""

from woolf.ledger.ledger import Ledger

__all__ = ["Ledger"]
