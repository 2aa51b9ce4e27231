"""The ledger's history as a tool: evaluate any version, diff two, bisect a regression, revert a merge.

Usage:
    from woolf.history import Evaluator, diff_versions, bisect, revert
    Evaluator(ledger, Path("other.txt")).metrics(ledger.show(3))      # cached per (version, data sha256)
    diff_versions(ledger, 2, 5); bisect(ledger, benchmark=Path("b.txt")); revert(ledger, 4)
"""

from woolf.history.bisect import bisect
from woolf.history.diff import diff_versions
from woolf.history.evaluate import Evaluator, read_benchmark_file
from woolf.history.revert import revert

__all__ = ["Evaluator", "bisect", "diff_versions", "read_benchmark_file", "revert"]
