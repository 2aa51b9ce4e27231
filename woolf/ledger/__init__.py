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

from __future__ import annotations

__all__ = ["Ledger"]


def __getattr__(name):
    # lazy: importing a submodule (woolf.ledger.verdicts) does not load the Ledger's storage stack
    if name == "Ledger":
        from woolf.ledger.ledger import Ledger

        return Ledger
    raise AttributeError(name)
