"""The validator's state as explicit objects: what it keeps across passes, what one pass reads once,
and what one round of a quorum vote holds.

Usage:
    state = ValidatorState()                      # a ValidatorContext holds one: v.ctx.state, v.state
    state.retry_later(pr_id, 60.0)                # run() skips it until then
    state.remember(pr_id, Judged(main.commit, verdict, step, sha), keep=KEEP_STEPS)
    check_queue(ctx, pr)                          # the stages reach it through their context: ctx.state
    vote_one(ctx, pr_id, fixed=Fixed(main.commit, verdict, step, sha, pr.head))   # CI: judged elsewhere

Nothing here reads git, storage or the forge: the modules that fill a field say how
(queue.py the queue's, screen.py the copy and replay checks', quorum.py the votes', retrain.py,
drawdown.py and standing.py what they measured or read once per main head).
The records are immutable; ValidatorState's collections and a Round are not.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from woolf.core.retrain_speed import RetrainSpeed

if TYPE_CHECKING:
    from woolf.core.merge_rules import Step
    from woolf.forges.base import PullRequest
    from woolf.protocol.config import ValidatorsConfig
    from woolf.protocol.tally import Ballot
    from woolf.protocol.versions import Version
    from woolf.timing import Timer
    from woolf.validator.drawdown import Best
    from woolf.validator.verdict import Verdict


@dataclass(frozen=True)
class Pending:
    """A rejection made (and signed) but not pushed yet: Validator.flush pushes it with others."""

    verdict: Verdict
    commit: str  # the verdict commit (Forge.verdict_commit)
    ref: str  # the PR's verdict ref it is pushed to


@dataclass(frozen=True)
class Judged:
    """This validator's judgment of one PR against one main head: what its vote says."""

    main: str  # main's commit it was judged against (a vote counts only against that head)
    verdict: Verdict
    step: Step | None  # the merge Step, candidate in memory; None when rejected, or dropped for memory
    sha: str | None  # sha256 of the candidate's weights file (the vote's Woolf-Candidate-Sha256)


@dataclass(frozen=True)
class Fixed(Judged):
    """A verdict judged elsewhere (a re-checked CI record): vote_one votes it and never evaluates."""

    head: str  # the PR head it was judged at

    def moved(self, pr, main) -> str | None:
        """Why it no longer applies to ``pr`` against ``main``; None while it does."""
        if self.head != pr.head:
            return "the PR's head moved since evaluation"
        if self.main != main.commit:
            return "main moved since evaluation"
        return None


@dataclass(frozen=True)
class Unpushed:
    """This validator's new vote, made (and signed) here but not pushed yet."""

    ballot: Ballot
    old: str | None  # the tip of its vote ref that the push replaces (the push's lease)


@dataclass
class Round:
    """One round of quorum.vote_one on one PR (lives for that round): what it read, judged and voted."""

    pr: PullRequest
    main: Version
    q: ValidatorsConfig  # quorum, epsilon, vote_timeout, as the config on main says this round
    me: str  # the name this validator votes under
    timer: Timer
    ballots: list[Ballot]  # every counted vote on the PR, whatever main it was cast against (expiry)
    current: list[Ballot]  # the votes against main's head, this validator's new one once made
    mine: Ballot | None  # this validator's vote among them
    judged: Judged | None = None  # what this validator's vote says
    unpushed: Unpushed | None = None  # its new vote while not pushed
    pushed: bool = False  # this round pushed that vote on its own


@dataclass(frozen=True)
class MergedDeltas:
    main: str  # main's commit they were read at
    sha256s: set[str]  # delta sha256 of every merged version (admission's replay check)


@dataclass(frozen=True)
class Resident:
    """Main's weights kept in memory between PRs: the version this validator merged last."""

    commit: str  # the version's commit: used only while main's head is still that commit
    weights: dict  # {name: tensor}: what this validator wrote, hashed and pushed as that version
    norm: float | None = None  # their norm (scores.norm), once measured


@dataclass(frozen=True)
class MergedContents:
    main: str  # main's commit they were read at
    contents: dict[str, tuple[int, str]]  # tensor content sha256 -> (version, PR id) of every merged delta


@dataclass(frozen=True)
class OverLimit:
    snapshot: list  # the open_snapshot it was computed from (compared by identity)
    limit: int  # queue.max_open_per_contributor it was computed for
    over: dict[str, int]  # PR id -> its contributor's open PRs (core.fairness.beyond_limit)


@dataclass
class ValidatorState:
    # -- one pass: set by Validator.run, read by the steps it runs ------------------------------------
    # the open PRs as the latest pass read them (per-contributor limits, copies); replaced by the
    # next pass, never cleared; None before the first (screen then lists the forge itself)
    open_snapshot: list[PullRequest] | None = None
    # beyond_limit of that snapshot (screen._over): made again when the snapshot or the limit changes
    over: OverLimit | None = None
    # within run(), on a forge that batches_verdicts and under quorum 1: rejections wait in pending
    batching: bool = False
    # those rejections, not pushed yet; run() flushes them BATCH at a time and at the pass's end
    pending: list[Pending] = field(default_factory=list)

    # -- across passes: as long as the Validator ------------------------------------------------------
    # PR id -> monotonic time before which run() does not try again a PR that failed without a verdict
    retry_at: dict[str, float] = field(default_factory=dict)
    # malformed PR refs (Forge.skipped) already logged: each is reported once
    reported: set[str] = field(default_factory=set)
    # main commit -> main's metrics on the benchmark ("before"): one evaluation per head, never dropped
    eval_cache: dict[str, dict] = field(default_factory=dict)
    # merged deltas' sha256 as of one main head (step.merged_deltas): read again when main moves
    merged: MergedDeltas | None = None
    # merged deltas' tensor contents as of one main head (screen._contents): read again when main moves
    contents: MergedContents | None = None
    # other PRs' deltas read by the copy check, by delta sha256 (or md5), least recently used first;
    # at most screen.CACHE_BYTES of tensors (screen._load evicts)
    deltas: OrderedDict[str, dict] = field(default_factory=OrderedDict)
    # this pass's keyless download budget and signed PR ids (validator/intake.py Pass); None
    # outside run() and under a quorum: no budget. keyless_spent: "PR id sha256" -> its download seconds,
    # all passes (run() makes it a validator/downloads.py DownloadTimes: kept on disk, across processes)
    keyless: object | None = None
    keyless_spent: dict[str, float] = field(default_factory=dict)
    # proofs of training (validator/audit_wait.py): "checked" holds (served state sha256, link) pairs
    # whose digest matched, so a deferred PR's states are digested once across passes
    proofs: dict = field(default_factory=dict)
    # the copy index (woolf/validator/copyindex.py): content hash and sketch of every delta the
    # copy check read, by delta sha256, with its secret seed; made on first use
    copy_index: object | None = None
    # main's weights as this validator merged them last (publish.merge sets it after the push;
    # step.candidate takes it when main's head is still that commit, else drops it and reads main)
    resident: Resident | None = None
    # the candidate being written and hashed in a helper thread while it is evaluated
    # (validator/ahead.py): publish.merge takes it; a verdict that publishes nothing cancels it
    ahead: object | None = None
    # quorum: PR id -> this validator's judgment, until the PR is settled or no longer open; at most
    # quorum.KEEP_STEPS of the other PRs keep their candidate in memory (remember)
    judged: dict[str, Judged] = field(default_factory=dict)
    # quorum: invalid votes (ref + why) already logged: each is reported once
    ignored_votes: set[str] = field(default_factory=set)
    # quorum: the name this validator votes under (its key's in allowed_signers), found once
    voter_name: str | None = None
    # quorum: PR id -> unix time its delta was first found unavailable in storage; never dropped
    unavailable_since: dict[str, float] = field(default_factory=dict)
    # re-training (validator/retrain.py): this validator's measured re-training speeds, per unit of work
    # and robust to one recipe (core/retrain_speed.py)
    speed: RetrainSpeed = field(default_factory=RetrainSpeed)
    # the drawdown's reference (validator/drawdown.py): (main commit, metric, direction) -> the best
    # version reached in the window of trust, extended from the parent's entry as main moves
    best: dict[tuple[str, str, str], Best | None] = field(default_factory=dict)
    # each window's loss of versions on the benchmark and scoring shards (validator/windows.py), and a
    # candidate's until it is published; made on first use
    windows: object | None = None
    # the norm guard's standing (validator/standing.py): main commit -> keyed contributors' median norms
    standing: dict[str, list[float]] = field(default_factory=dict)

    def retry_later(self, sub_id: str, seconds: float) -> None:
        """run() passes ``sub_id`` by for ``seconds`` (it failed without a verdict)."""
        self.retry_at[sub_id] = time.monotonic() + seconds

    def take_pending(self) -> list[Pending]:
        """The rejections waiting for a push, now no longer waiting here."""
        pending, self.pending = self.pending, []
        return pending

    def remember(self, sub_id: str, judged: Judged, keep: int) -> Judged:
        """Keep ``judged`` for ``sub_id``; of the other PRs' candidates only the last ``keep`` (in the order
        the PRs were first judged) stay in memory: the others' steps are dropped, made again if needed."""
        self.judged[sub_id] = judged
        kept = [i for i, j in self.judged.items() if i != sub_id and j.step is not None]
        for other in kept[:max(0, len(kept) - keep)]:
            self.judged[other] = replace(self.judged[other], step=None)
        return judged

    def forget(self, sub_id: str) -> None:
        """``sub_id`` is settled or no longer open: its judgment goes."""
        self.judged.pop(sub_id, None)
