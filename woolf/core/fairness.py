"""Who is who, and whose turn it is: contributor identity for limits and ratings, the fair queue.

Usage:
    canonical("ＡＬＩＣＥ") == canonical("alice")          # NFKC + casefold: one contributor
    queue = fair_order(prs)                               # round-robin by contributor, then received
    over = beyond_limit(queue, limit=4)                   # {pr id: open count} of PRs after its first 4

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
    never by N. A name is a claim: N PRs under N fresh names all sit in the first round
    (PRs whose id and submission.json disagree have no contributor and share one turn);
    only `signing.contributors = "required"` makes names as scarce as keys.
    """
    return [pr for _, pr in sorted(_ranked(prs), key=lambda rp: (rp[0], rp[1].queue_key()))]


def beyond_limit(prs, limit: int) -> dict[str, int]:
    """{id: count} of each contributor's open PRs received after its first ``limit`` (in receive
    order), with how many that contributor had open. The oldest are kept: a name is a claim, and PRs
    received later (junk claiming an honest contributor's name, or her own flood) never evict work
    that was already waiting. A contributor replaces one of its PRs by withdrawing it. PRs without
    a contributor (unreadable, or whose id names another) are not counted: they are rejected anyway."""
    ranked = _ranked(pr for pr in prs if canonical(pr.contributor))
    count: dict[str, int] = {}
    for _, pr in ranked:
        count[canonical(pr.contributor)] = count.get(canonical(pr.contributor), 0) + 1
    return {pr.id: count[canonical(pr.contributor)] for rank, pr in ranked if rank >= limit}
