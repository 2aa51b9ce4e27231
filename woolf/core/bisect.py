"""Binary search for the first bad version, git-bisect style, with a bound on evaluations.

Usage:
    found, probes = first_bad(good=0, bad=999, is_bad=lambda n: loss(n) > limit)
    # found: the first version in (good, bad] for which is_bad is true, or None; probes: [(n, bad)]

``good`` is known good (the caller checked it). ``bad`` is *not* assumed bad:
the search runs over (good, bad + 1] with bad + 1 a virtual bad version that is
never evaluated, so ``bad`` is checked only when the answer lands on it, and
every path costs at most ceil(log2(bad - good + 1)) calls of ``is_bad``
(10 for 1,000 versions). ``is_bad`` must be monotone over the range (good
versions, then bad ones), as git bisect assumes.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def first_bad(good: int, bad: int, is_bad: Callable[[int], bool]) -> tuple[int | None, list[tuple[int, bool]]]:
    if not good < bad:
        raise ValueError(f"good ({good}) must be older than bad ({bad})")
    lo, hi = good, bad + 1  # invariant: lo is good; hi is bad, or the virtual version bad + 1
    probes: list[tuple[int, bool]] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        verdict = bool(is_bad(mid))
        probes.append((mid, verdict))
        if verdict:
            hi = mid
        else:
            lo = mid
    return (hi if hi <= bad else None), probes


def max_probes(good: int, bad: int) -> int:
    """The most ``is_bad`` calls first_bad makes over (good, bad]."""
    return math.ceil(math.log2(bad - good + 1))
