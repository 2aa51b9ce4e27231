"""The Forge interface and the pull-request record every forge returns.

Usage:
    forge.open(sub_id, head_sha); forge.list(); forge.get(sub_id)
    forge.comment(sub_id, text); forge.reject(pr, reason, fields); forge.merge(pr, commit, main_sha)
    forge.withdraw(sub_id)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field

from woolf.protocol import layout
from woolf.protocol.contributor import claimed_contributor
from woolf.protocol.layout import META_MAX_BYTES, META_MAX_DEPTH
from woolf.protocol.safejson import loads_untrusted

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
    submission: dict | None = field(default=None, repr=False)  # submission.json as read

    def queue_key(self) -> tuple:
        """Queue order: when the forge received the PR (its number, or first sight), never the id's text."""
        first = self.received if self.received is not None else float("inf")
        return (first, self.number if self.number is not None else 0, self.id)

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("submission")
        data["metrics"] = {"before": self.metrics_before, "after": self.metrics_after}
        return data


class Forge(ABC):
    @abstractmethod
    def open(self, sub_id: str, head: str) -> PullRequest: ...

    @abstractmethod
    def list(self, state: str | None = None) -> list[PullRequest]: ...

    @abstractmethod
    def get(self, sub_id: str) -> PullRequest: ...

    @abstractmethod
    def comment(self, sub_id: str, text: str) -> None: ...

    @abstractmethod
    def reject(self, pr: PullRequest, reason: str, fields: dict) -> None:
        """Close as rejected; raises RaceLostError if the PR already has a verdict."""

    @abstractmethod
    def merge(self, pr: PullRequest, version_commit: str, main_sha: str) -> None:
        """Fast-forward main to ``version_commit`` and mark merged, atomically.

        Raises RaceLostError when main moved or the PR got a verdict meanwhile.
        """

    @abstractmethod
    def withdraw(self, sub_id: str, by: str | None = None, force: bool = False) -> PullRequest: ...

    def refresh(self, sub_id: str) -> PullRequest:
        """The PR's current state, as a validator needs it right before deciding."""
        return self.get(sub_id, fetch=True)


_META_CACHE: dict[str, dict | None] = {}  # submission.json blob id -> parsed metadata (None: unusable)


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
