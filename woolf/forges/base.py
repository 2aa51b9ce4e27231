"""The Forge interface and the pull-request record every forge returns.

Usage:
    forge.open(sub_id, head_sha); forge.list(); forge.get(sub_id)
    forge.comment(sub_id, text); forge.reject(pr, reason, fields); forge.merge(pr, commit, main_sha)
    forge.withdraw(sub_id); forge.expire(pr, reason, fields); forge.vote_status(pr, voter, decision, reason)
    if forge.batches_verdicts: forge.push_verdicts([forge.verdict_commit(pr, "rejected", reason, fields)])

A forge says what it can do by class attributes (``batches_verdicts``, ``votes_ride_verdicts``)
and keeps the defaults of the methods it has nothing to do for (``skipped``, ``vote_status``), so
its callers never ask which forge it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from woolf.errors import ForgeError
from woolf.protocol import layout
from woolf.protocol.contributor import claimed_contributor, unclaimed
from woolf.protocol.layout import META_MAX_BYTES, META_MAX_DEPTH
from woolf.protocol.safejson import loads_untrusted
from woolf.protocol.signers import signers_text

# quarantined: a PR whose refs cannot be a submission (a head or verdict that is no commit, a
# verdict without trailers); it never enters the queue and `woolf pr list` shows why.
STATES = ("open", "merged", "rejected", "withdrawn", "expired", "quarantined")  # expired: no quorum in time


@dataclass
class PullRequest:
    id: str
    state: str
    head: str  # the submission commit
    base_commit: str | None = None
    base_version: int | None = None
    contributor: str | None = None
    message: str | None = None
    reason: str | None = None
    version: int | None = None  # the version it became, when merged
    staleness: int | None = None
    attenuation: float | None = None
    metrics_before: dict | None = None
    metrics_after: dict | None = None
    timings: dict | None = None
    validator: str | None = None
    verdict_commit: str | None = None
    number: int | None = None  # the forge's PR number, where it has one
    author: str | None = None  # the forge account that opened it, where there is one
    base_sha: str | None = None  # the target branch's commit the forge reports
    received: int | None = None  # unix time this clone first saw the PR (local forge; the queue order)
    receipt: tuple | None = None  # (receipt number, position): the hub's own receive order (local forge)
    submission: dict | None = field(default=None, repr=False)  # submission.json as read
    retrain: dict | None = None  # the verdict's Woolf-Retrain: re-trained from its recipe? matched? (or why not)

    def queue_key(self) -> tuple:
        """Queue order: when the forge received the PR (its number, or first sight; PRs first seen in one
        fetch in the hub's receipt order), never the id's text, which the submitter chooses."""
        first = self.received if self.received is not None else float("inf")
        receipt = self.receipt if self.receipt is not None else (float("inf"), 0)
        return (first, receipt, self.number if self.number is not None else 0, self.id)

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("submission")
        data["recipe"] = (self.submission or {}).get("recipe") if isinstance(self.submission, dict) else None
        data["metrics"] = {"before": self.metrics_before, "after": self.metrics_after}
        return data


class Forge(ABC):
    # Capabilities (class attributes; a forge that has one sets it True):
    batches_verdicts = False  # verdict_commit + push_verdicts: several verdicts in one atomic push
    votes_ride_verdicts = False  # reject/merge take ``also``: ref updates (a quorum's last vote) in their push
    records_ride_prs = False  # open takes ``also``: ref updates (the task's submitted record) in its push
    prs_come_with_main = False  # the ledger's fetch of main brings every PR (refs in origin): list(local_only)
    carries_challenges = False  # a proof's challenge and answer commits under a PR (protocol/challenge.py)
    skipped: Sequence[tuple[str, str]] = ()  # (ref, why) of malformed PR refs in the last listing

    @abstractmethod
    def open(self, sub_id: str, head: str, also=None) -> PullRequest:
        """Open PR ``sub_id`` at commit ``head``; ``also``: (commit, ref, expected old) updates pushed
        atomically with it (records_ride_prs; a forge without it refuses a non-empty ``also``)."""

    @abstractmethod
    def list(self, state: str | None = None, local_only: bool = False) -> list[PullRequest]: ...

    @abstractmethod
    def get(self, sub_id: str, fetch: bool = True) -> PullRequest: ...

    @abstractmethod
    def comment(self, sub_id: str, text: str) -> None: ...

    @abstractmethod
    def reject(self, pr: PullRequest, reason: str, fields: dict, also=None) -> None:
        """Close as rejected; raises RaceLostError if the PR already has a verdict.

        ``also``: (commit, ref, expected old) updates pushed atomically with it (votes_ride_verdicts)."""

    @abstractmethod
    def expire(self, pr: PullRequest, reason: str, fields: dict) -> None:
        """Close a PR whose votes never reached quorum in time (validators.vote_timeout)."""

    @abstractmethod
    def merge(self, pr: PullRequest, version_commit: str, main_sha: str, also=None) -> None:
        """Fast-forward main to ``version_commit`` and mark merged, atomically.

        Raises RaceLostError when main moved or the PR got a verdict meanwhile. ``also``: as for reject.
        """

    @abstractmethod
    def withdraw(self, sub_id: str, by: str | None = None, force: bool = False) -> PullRequest: ...

    def refresh(self, sub_id: str) -> PullRequest:
        """The PR's current state, as a validator needs it right before deciding."""
        return self.get(sub_id, fetch=True)

    def vote_status(self, pr: PullRequest, voter: str, decision: str, reason: str) -> None:
        """Show one validator's vote on the PR, where the forge has a place for it (nothing by default)."""
        return None

    def verdict_commit(self, pr: PullRequest, state: str, reason: str, fields: dict) -> tuple[str, str]:
        """(commit, ref) of a verdict on ``pr``, not pushed yet (forges with batches_verdicts)."""
        raise ForgeError(f"{type(self).__name__} cannot make a verdict ahead of its push")

    def push_verdicts(self, verdicts: list[tuple[str, str]]) -> None:
        """Several verdicts from verdict_commit in one atomic push (forges with batches_verdicts)."""
        raise ForgeError(f"{type(self).__name__} cannot push verdicts together")

    def push_challenge(self, pr: PullRequest, validator: str, message: str) -> str:
        """Commit ``message`` (protocol/challenge.py) on the validator's challenge ref of ``pr`` and push it;
        the commit."""
        raise ForgeError(f"{type(self).__name__} cannot carry a proof's challenges")

    def push_answer(self, pr: PullRequest, message: str) -> str:
        """Commit ``message`` on ``pr``'s answer ref (chained after the answers there), push it; its commit."""
        raise ForgeError(f"{type(self).__name__} cannot carry a proof's answers")

    def challenges(self, pr: PullRequest) -> dict[str, list[tuple[str, str]]]:
        """{validator: [(commit, message), ...] oldest first} of the challenges on ``pr`` (unchecked)."""
        return {}

    def answers(self, pr: PullRequest) -> list[tuple[str, str]]:
        """[(commit, message), ...] oldest first of the answers on ``pr`` (unchecked)."""
        return []

    def _no_also(self, also) -> None:
        """For a forge without votes_ride_verdicts: ``also`` must be empty."""
        if also:
            raise ForgeError(f"{type(self).__name__} cannot push other refs with a verdict")


_META_CACHE: dict[str, dict | None] = {}  # submission.json blob id -> parsed metadata (None: unusable)


def disown_unsigned(git, prs: list[PullRequest], main: str | None = None) -> list[PullRequest]:
    """A PR naming a contributor with a key in main's allowed_signers, whose head that key did not
    sign, is nobody's: its contributor is cleared (junk in alice's name cost her rating)."""
    main = main or git.rev_parse("refs/remotes/origin/main") or git.rev_parse("refs/heads/main")
    text = signers_text(git, main) if main else None
    gone = unclaimed(git, {i: (p.contributor, p.head) for i, p in enumerate(prs) if p.contributor}, text)
    for i in gone:
        prs[i].contributor = None
    return prs


def fill_from_submission(git, pr: PullRequest) -> PullRequest:
    """Contributor, base and message from the head's submission.json, read as data.

    The contributor is kept only when it is a valid name (layout.CONTRIBUTOR): a
    newline or a separator in it would otherwise reach the trailers of the PR's
    verdict and votes (admission rejects such a PR, with that reason).

    The blob's size is checked before it is read, and what it parses to is kept
    per blob id, so a 300 MB submission.json costs one `cat-file -s` per listing.
    """
    info = git.object_info(f"{pr.head}:{layout.submission_paths(pr.id)[2]}")
    if info is None or info[1] != "blob":
        return pr
    oid, _, size = info
    if oid not in _META_CACHE:
        meta = None
        if size <= META_MAX_BYTES:
            try:
                meta = loads_untrusted(git.show_bytes(oid) or b"", META_MAX_BYTES, META_MAX_DEPTH)
            except ValueError:
                meta = None
        if len(_META_CACHE) > 4096:
            _META_CACHE.clear()
        _META_CACHE[oid] = meta if isinstance(meta, dict) else None
    meta = _META_CACHE[oid]
    if meta is not None:
        pr.submission = meta
        pr.contributor = claimed_contributor(pr.id, meta.get("contributor"))  # a valid name the id agrees with
        bv = meta.get("base_version")
        pr.base_version = bv if isinstance(bv, int) and not isinstance(bv, bool) else None
        pr.base_commit = meta.get("base_commit") if isinstance(meta.get("base_commit"), str) else None
        pr.message = meta.get("message") if isinstance(meta.get("message"), str) else None
    return pr
