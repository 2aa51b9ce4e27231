"""Who is who, and whose turn it is: contributor identity for limits and ratings, the fair queue.

Usage:
    canonical("ＡＬＩＣＥ") == canonical("alice")          # NFKC + casefold: one contributor
    queue = fair_order(prs)                               # round-robin by contributor, then received
    over = beyond_limit(queue, limit=4)                   # {pr id: rank} of PRs past a contributor's limit

Pure functions over anything with ``.contributor`` and ``.queue_key()`` (PullRequest).
"""

from __future__ import annotations

import unicodedata


def canonical(name: str | None) -> str:
    """One key per person: ``Alice``, ``alice`` and ``ａｌｉｃｅ`` are the same contributor."""
    if not isinstance(name, str):
        return ""
    once = unicodedata.normalize("NFKC", name).casefold()
    return unicodedata.normalize("NFKC", once).strip()


def _ranked(prs) -> list[tuple[int, object]]:
    seen: dict[str, int] = {}
    out = []
    for pr in sorted(prs, key=lambda p: p.queue_key()):
        who = canonical(pr.contributor)
        out.append((seen.get(who, 0), pr))
        seen[who] = seen.get(who, 0) + 1
    return out


def fair_order(prs) -> list:
    """Each contributor's first PR (by receive order), then each one's second, and so on.

    A contributor who floods the queue with N PRs delays the others by one PR per round,
    never by N.
    """
    return [pr for _, pr in sorted(_ranked(prs), key=lambda rp: (rp[0], rp[1].queue_key()))]


def beyond_limit(prs, limit: int) -> dict[str, int]:
    """{id: rank} of the open PRs past each contributor's first ``limit`` (in receive order)."""
    return {pr.id: rank for rank, pr in _ranked(prs) if rank >= limit}
