"""The verdict history as records: merged versions from main, rejections from the forge's verdicts.

Usage:
    recent = merged_records(ledger, limit=16)      # newest first; one `git log`
    records = verdict_history(ledger)               # every verdict, oldest first (time, id)

Everything comes from git (main's first-parent chain and the PR verdict refs), so
anyone with a clone recomputes the same ratings and credit. Trailers written before
scoring existed simply lack scores: such a record is rated from what it has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from woolf.core.fairness import canonical
from woolf.forges import forge_for
from woolf.protocol.contributor import unclaimed
from woolf.protocol.signers import signers_text
from woolf.protocol.trailers import float_field, int_field, json_field, parse_message

# rejections not held against anyone: the queue's lag, and the open-PR limit (a name without a key is
# a claim: junk claiming alice's name must not cost her rating; woolf/validator/screen.py OVER_LIMIT)
UNRATED = ("is over the ledger's max_staleness", "over the open-PR limit: contributor")


@dataclass
class Record:
    id: str | None
    contributor: str  # canonical (NFKC + casefold)
    state: str  # merged | rejected
    time: int
    version: int | None = None
    base_version: int | None = None
    head: str | None = None  # the submission commit (merged: the version's second parent)
    reason: str | None = None
    scores: dict | None = None
    flags: list = field(default_factory=list)
    before: dict | None = None
    after: dict | None = None
    delta_sha256: str | None = None
    content: str | None = None
    delta_norm: float | None = None

    @property
    def rated(self) -> bool:
        """Whether the verdict is a match result: a PR refused unread because it was too stale by the time
        its turn came says nothing about its work, nor does a PR over the open-PR limit (its name may be
        another's claim)."""
        if self.state != "rejected" or self.scores is not None:
            return True
        return not any(x in (self.reason or "") for x in UNRATED)

    def improvement(self, metric: str = "loss", direction: str = "minimize") -> float | None:
        if not isinstance(self.before, dict) or not isinstance(self.after, dict):
            return None
        b, a = self.before.get(metric), self.after.get(metric)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in (b, a)):
            return None
        return (b - a) if direction == "minimize" else (a - b)


def _record(commit: str, parents: list[str], time: int, message: str, state: str | None) -> Record | None:
    _, f = parse_message(message)
    if state is None:  # a commit on main: a version made from a submission
        if int_field(f, "Woolf-Version") is None or not f.get("Woolf-Submission") or len(parents) != 2:
            return None
        state = "merged"
    scores = json_field(f, "Woolf-Scores")
    flags = json_field(f, "Woolf-Flags")
    return Record(
        id=f.get("Woolf-Submission"), contributor=canonical(f.get("Woolf-Contributor")), state=state,
        time=time, version=int_field(f, "Woolf-Version") if state == "merged" else None,
        base_version=int_field(f, "Woolf-Base-Version"),
        head=parents[1] if state == "merged" else (parents[0] if parents else None),
        reason=f.get("Woolf-Reason"), scores=scores if isinstance(scores, dict) else None,
        flags=[x for x in flags if isinstance(x, str)] if isinstance(flags, list) else [],
        before=json_field(f, "Woolf-Metrics-Before"), after=json_field(f, "Woolf-Metrics-After"),
        delta_sha256=f.get("Woolf-Delta-Sha256"), content=f.get("Woolf-Delta-Content"),
        delta_norm=float_field(f, "Woolf-Delta-Norm"))


def _log(git, args: list[str], state: str | None) -> list[Record]:
    """Records of the commits `git rev-list args` names, read framed by size (Git.commit_records):
    a separator byte in a hostile verdict's message can neither split a record nor stop the reading."""
    shas = git.out("rev-list", *args).split()
    out = []
    for commit, parents, time, message in git.commit_records(shas):
        rec = _record(commit, parents, time, message, state)
        if rec is not None:
            out.append(rec)
    return out


def merged_records(ledger, limit: int | None = None, ref: str | None = None) -> list[Record]:
    """Versions made from submissions, newest first."""
    args = ["--first-parent"] + ([f"-n{limit}"] if limit is not None else [])
    return _log(ledger.git, [*args, ref or ledger.main_ref], None)


def rejected_records(ledger, forge=None) -> list[Record]:
    """Rejections, from the verdict commits the forge lists (trailers read from git where it has them)."""
    if forge is None:
        forge = forge_for(ledger)
    prs = [p for p in forge.list() if p.state == "rejected"]
    commits = [p.verdict_commit for p in prs if p.verdict_commit]
    found = {}
    if commits:
        for rec in _log(ledger.git, ["--no-walk=unsorted", *commits], "rejected"):
            found[rec.id] = rec
    out = []
    for p in prs:
        rec = found.get(p.id)
        if rec is None:  # a forge that keeps verdicts outside git (comments): what the PR record says
            rec = Record(p.id, canonical(p.contributor), "rejected", 0, base_version=p.base_version,
                         head=p.head, reason=p.reason, before=p.metrics_before, after=p.metrics_after)
        rec.contributor = rec.contributor or canonical(p.contributor)
        out.append(rec)
    return out


def verdict_history(ledger, forge=None) -> list[Record]:
    """Every verdict, oldest first: merged versions and rejections, ordered by (time, id)."""
    records = merged_records(ledger) + rejected_records(ledger, forge)
    head = ledger.git.rev_parse(ledger.main_ref)
    text = signers_text(ledger.git, head) if head else None  # a keyed name is claimed only by its key
    for i in unclaimed(ledger.git, {i: (r.contributor, r.head) for i, r in enumerate(records) if r.contributor}, text):
        records[i].contributor = ""
    return sorted(records, key=lambda r: (r.time, r.version if r.version is not None else -1, r.id or ""))
