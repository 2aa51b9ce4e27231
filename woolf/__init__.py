"""GoodWoolf Core: a git repository as a Training Ledger.

Usage:
    from woolf import Ledger
    ledger = Ledger.open(".")
    for v in ledger.log(limit=5):
        print(v.version, v.metrics_after)
"""

from woolf._version import __version__
from woolf.errors import WoolfError

__all__ = ["Ledger", "WoolfError", "__version__"]


def __getattr__(name):
    # Lazy import: `import woolf` stays cheap (no torch, no dvc) for the CLI's --help.
    if name == "Ledger":
        from woolf.ledger.ledger import Ledger

        return Ledger
    raise AttributeError(name)
