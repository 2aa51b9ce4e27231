"""The git-native forge: pull requests as refs in the ledger's origin, no server.

Usage:
    forge = LocalForge.for_ledger(ledger)
    forge.open(sub_id, head_sha)          # pushes refs/woolf/pr/<id>/head
    forge.list(state="open")

A PR is `refs/woolf/pr/<id>/head` (the submission commit). Its verdict is
`refs/woolf/pr/<id>/verdict`, created once with a compare-and-swap ("must not
exist"): for a merge it is the version commit itself, pushed atomically with
main; for a rejection or withdrawal it is a commit on top of the head whose
trailers carry the state, reason and metrics. State is derived from git alone.

Every ref is read as attacker-written: refs that are not
`refs/woolf/pr/<id>/{head,verdict,comments}` are skipped and reported
(`forge.skipped`); a head or verdict that is not a commit, or a verdict
without trailers, makes the PR "quarantined" (shown, never queued), and so does any failure
while reading its objects (an oversized verdict commit, a bug a parser missed). The
queue is ordered by when this clone first received the head ref (the first
entry of its reflog, written by our own fetch), not by the id's text, whose
timestamp the submitter chooses; PRs first seen in the same fetch are ordered by the hub's
receipt log (woolf/protocol/receipts.py), then by id.
"""

from __future__ import annotations

import logging

from woolf.errors import ForgeError, RaceLostError, UsageError, WoolfError
from woolf.forges.base import Forge, PullRequest, disown_unsigned, fill_from_submission
from woolf.git.commits import read_commit
from woolf.git.repo import Git
from woolf.protocol import layout
from woolf.protocol.challenge import MAX_ANSWERS, MAX_CHALLENGES, answer_ref, challenge_ref
from woolf.protocol.receipts import RECEIPTS, read_receipts
from woolf.protocol.trailers import (
    float_field,
    format_message,
    int_field,
    json_field,
    parse_message,
)

log = logging.getLogger("woolf.forge")
_KINDS = ("head", "verdict", "comments")


class LocalForge(Forge):
    batches_verdicts = True  # verdicts are refs: many go in one atomic push (one run of the hub's hook)
    votes_ride_verdicts = True  # a quorum's last vote goes in the push that settles the PR
    records_ride_prs = True  # a task's submitted record goes in the push that opens its PR
    prs_come_with_main = True  # Ledger.fetch brings refs/woolf/pr/* with main
    carries_challenges = True  # refs/woolf/pr/<id>/challenge/<name> and .../answer (protocol/challenge.py)

    def __init__(self, git: Git, remote: str = "origin"):
        self.git = git
        self.remote = remote
        self.skipped: list[tuple[str, str]] = []  # (ref, why) of malformed PR refs in the last listing

    @classmethod
    def for_ledger(cls, ledger) -> LocalForge:
        return cls(ledger.git)

    def _ref(self, sub_id: str, kind: str) -> str:
        if not layout.SUBMISSION_ID.match(sub_id):
            raise UsageError(f"{sub_id!r} is not a submission id", hint="see `woolf pr list`")
        return f"{layout.PR_PREFIX}/{sub_id}/{kind}"

    def sync(self) -> None:
        self.git.fetch(self.remote, f"+{layout.PR_PREFIX}/*:{layout.PR_PREFIX}/*")

    # -- writing ---------------------------------------------------------------
    def open(self, sub_id: str, head: str, also=None) -> PullRequest:
        ref = self._ref(sub_id, "head")
        updates, leases = [(head, ref)], {ref: None}
        for commit, other, old in also or ():
            updates, leases = [*updates, (commit, other)], {**leases, other: old}
        try:
            self.git.push(self.remote, updates, leases=leases)
        except RaceLostError:
            if not also:
                raise ForgeError(f"a pull request named {sub_id} already exists") from None
            return self.open(sub_id, head)  # what rode along lost its race: the PR alone (it says if it exists)
        self.git.run("update-ref", "--create-reflog", ref, head)
        for commit, other in updates[1:]:
            self.git.run("update-ref", other, commit)
        return self.get(sub_id, fetch=False)

    def verdict_commit(self, pr: PullRequest, state: str, reason: str, fields: dict) -> tuple[str, str]:
        """(commit, ref) of a verdict on ``pr``, made and signed here, not pushed yet."""
        message = format_message(
            f"woolf: {state} {pr.id}",
            {"Woolf-Verdict": state, "Woolf-Submission": pr.id, "Woolf-Reason": " ".join(reason.split()),
             **fields},
        )
        commit = self.git.commit_tree(f"{pr.head}^{{tree}}", message, [pr.head])  # signed if keyed
        return commit, self._ref(pr.id, "verdict")

    def _close(self, pr: PullRequest, state: str, reason: str, fields: dict, also=None) -> str:
        commit, ref = self.verdict_commit(pr, state, reason, fields)
        self._push([(commit, ref)], {ref: None}, also)
        return commit

    def push_verdicts(self, verdicts: list[tuple[str, str]]) -> None:
        """Several verdicts from verdict_commit in one atomic push (one run of the hub's hook);
        RaceLostError when any PR already has a verdict, ForgeError when the hub refuses one."""
        self._push(verdicts, {ref: None for _, ref in verdicts}, None)

    def _push(self, updates: list[tuple[str, str]], leases: dict, also) -> None:
        """One atomic push; ``also``: more (commit, ref, expected old) updates in it (a quorum's last vote)."""
        for commit, ref, old in also or ():
            updates, leases = [*updates, (commit, ref)], {**leases, ref: old}
        self.git.push(self.remote, updates, leases=leases)
        for commit, ref in updates:
            if ref != layout.MAIN:
                self.git.run("update-ref", ref, commit)

    def reject(self, pr: PullRequest, reason: str, fields: dict, also=None) -> None:
        self._close(pr, "rejected", reason, fields, also)

    def expire(self, pr: PullRequest, reason: str, fields: dict) -> None:
        """Settle a PR whose votes never reached quorum in time (validators.vote_timeout)."""
        self._close(pr, "expired", reason, fields)

    def withdraw(self, sub_id: str, by: str | None = None, force: bool = False) -> PullRequest:
        """Close an open PR; ``by`` (a contributor id) is recorded, and must be its author unless ``force``."""
        pr = self.get(sub_id)
        if pr.state != "open":
            raise UsageError(f"{sub_id} is already {pr.state}")
        author = pr.contributor
        if by is not None and author is not None and by != author and not force:
            raise UsageError(f"{sub_id} was opened by {author!r}, and you are {by!r}: only its contributor "
                             "withdraws a pull request",
                             hint="a validator rejects it instead; `--force` closes it anyway, recorded "
                                  f"as closed by {by}")
        if by is None or by == author:
            reason = f"withdrawn by its contributor {author}" if author else "withdrawn"
        else:
            reason = f"closed by {by}, not its contributor {author or '(unknown)'}"
        try:
            self._close(pr, "withdrawn", reason, {} if by is None else {"Woolf-Closed-By": by})
        except RaceLostError:
            raise UsageError(f"{sub_id} got a verdict while it was being withdrawn") from None
        return self.get(sub_id, fetch=False)

    def merge(self, pr: PullRequest, version_commit: str, main_sha: str, also=None) -> None:
        # One atomic push: main moves and the verdict ref is created together, or neither.
        ref = self._ref(pr.id, "verdict")
        self._push([(version_commit, layout.MAIN), (version_commit, ref)], {layout.MAIN: main_sha, ref: None}, also)

    def comment(self, sub_id: str, text: str) -> None:
        ref = self._ref(sub_id, "comments")
        old = self.git.rev_parse(ref)
        pr = self.get(sub_id, fetch=False)
        commit = self.git.commit_tree(f"{pr.head}^{{tree}}", format_message(f"woolf: comment on {sub_id}", {}, text),
                                      [old or pr.head])
        self.git.push(self.remote, [(commit, ref)], leases={ref: old})
        self.git.run("update-ref", ref, commit)

    def _chain_push(self, pr: PullRequest, ref: str, message: str) -> str:
        old = self.git.rev_parse(ref)
        commit = self.git.commit_tree(f"{pr.head}^{{tree}}", message, [old or pr.head])  # signed if keyed
        self.git.push(self.remote, [(commit, ref)], leases={ref: old})
        self.git.run("update-ref", ref, commit)
        return commit

    def push_challenge(self, pr: PullRequest, validator: str, message: str) -> str:
        return self._chain_push(pr, challenge_ref(pr.id, validator), message)

    def push_answer(self, pr: PullRequest, message: str) -> str:
        return self._chain_push(pr, answer_ref(pr.id), message)

    def _chain(self, pr: PullRequest, ref: str, most: int) -> list[tuple[str, str]]:
        """(commit, message) oldest first along ``ref``'s first parents down to the PR's head (at most
        ``most``: the hub allows no more; a longer chain is someone's, not the hub's)."""
        tip = self.git.rev_parse(ref)
        if tip is None:
            return []
        commits = self.git.out("rev-list", "--first-parent", f"--max-count={most}", tip, f"^{pr.head}").split()
        out = []
        for c in reversed(commits):
            try:
                out.append((c, read_commit(self.git, c)[1]))
            except WoolfError:
                continue  # an unreadable commit answers nothing
        return out

    def challenges(self, pr: PullRequest) -> dict[str, list[tuple[str, str]]]:
        prefix = f"{layout.PR_PREFIX}/{pr.id}/challenge/"
        return {ref[len(prefix):]: self._chain(pr, ref, MAX_CHALLENGES)
                for ref in self.git.refs(prefix) if "/" not in ref[len(prefix):]}

    def answers(self, pr: PullRequest) -> list[tuple[str, str]]:
        return self._chain(pr, answer_ref(pr.id), MAX_ANSWERS)

    # -- reading ---------------------------------------------------------------
    def _scan(self, refs: dict[str, tuple[str, str]]) -> dict[str, dict[str, tuple[str, str]]]:
        """{id: {kind: (sha, type)}} of well-formed PR refs; every other ref is skipped and reported."""
        prs: dict[str, dict[str, tuple[str, str]]] = {}
        self.skipped = []
        for ref, target in sorted(refs.items()):
            if ref == RECEIPTS:
                continue  # the hub's receipt log (woolf/protocol/receipts.py): the queue order, not a PR
            parts = ref[len(layout.PR_PREFIX) + 1:].split("/")
            if len(parts) == 3 and parts[1] in ("votes", "challenge") or parts[1:] == ["answer"]:
                continue  # a validator's vote (woolf/protocol/votes.py) or a proof's challenge or answer
                # (woolf/protocol/challenge.py): read by the quorum and the audit, not a PR's state
            if len(parts) != 2 or not layout.SUBMISSION_ID.match(parts[0]) or parts[1] not in _KINDS:
                self.skipped.append((ref, "not refs/woolf/pr/<submission id>/{head,verdict,comments}"))
                continue
            prs.setdefault(parts[0], {})[parts[1]] = target
        for sub_id in [i for i, kinds in prs.items() if "head" not in kinds]:
            self.skipped += [(f"{layout.PR_PREFIX}/{sub_id}/{k}", "a PR ref without a head") for k in prs.pop(sub_id)]
        for ref, why in self.skipped:
            log.info("skipped malformed PR ref %r: %s", ref, why)  # `pr list` prints them; validators warn once
        return prs

    def list(self, state: str | None = None, local_only: bool = False) -> list[PullRequest]:
        if not local_only:
            self.sync()
        found = self._scan(self.git.refs_typed(f"{layout.PR_PREFIX}/"))
        prs = disown_unsigned(self.git, [self._read_or_quarantine(i, kinds) for i, kinds in found.items()])
        order = read_receipts(self.git)
        for pr in prs:
            pr.receipt = order.get(pr.id)
        prs.sort(key=PullRequest.queue_key)
        return [p for p in prs if state is None or p.state == state]

    def refresh(self, sub_id: str) -> PullRequest:
        return self.get(sub_id, fetch=False)  # the validator's ledger.fetch() just brought the refs

    def get(self, sub_id: str, fetch: bool = True) -> PullRequest:
        self._ref(sub_id, "head")  # a usage error for a malformed id
        if fetch:
            self.sync()
        found = self._scan(self.git.refs_typed(f"{layout.PR_PREFIX}/{sub_id}/"))
        if sub_id not in found:
            raise UsageError(f"no pull request {sub_id}", hint="see `woolf pr list`")
        [pr] = disown_unsigned(self.git, [self._read_or_quarantine(sub_id, found[sub_id])])
        pr.receipt = read_receipts(self.git).get(sub_id)
        return pr

    def _read_or_quarantine(self, sub_id: str, kinds: dict[str, tuple[str, str]]) -> PullRequest:
        """_read, where any failure on the PR's attacker-written objects makes this one PR
        "quarantined" (shown with the failure, never queued) instead of failing every listing."""
        try:
            return self._read(sub_id, kinds)
        except Exception as exc:  # noqa: BLE001 - one PR's bytes must never stop `pr list` or a validator
            why = " ".join(str(exc).split())[:200]
            log.warning("%s: its refs could not be read (%s: %s); quarantined", sub_id, type(exc).__name__, why)
            return PullRequest(id=sub_id, state="quarantined", head=kinds["head"][0],
                               reason=f"its refs could not be read ({type(exc).__name__}: {why})")

    def _read(self, sub_id: str, kinds: dict[str, tuple[str, str]]) -> PullRequest:
        head, head_type = kinds["head"]
        pr = PullRequest(id=sub_id, state="open", head=head,
                         received=self.git.first_logged(self._ref(sub_id, "head")))
        if head_type != "commit":
            pr.state, pr.reason = "quarantined", f"the PR head is a {head_type[:10]}, not a commit"
            return pr
        fill_from_submission(self.git, pr)
        if "verdict" not in kinds:
            return pr
        verdict, verdict_type = kinds["verdict"]
        pr.verdict_commit = verdict
        if verdict_type != "commit":
            pr.state, pr.reason = "quarantined", f"the verdict ref is a {verdict_type[:10]}, not a commit"
            return pr
        _, f = parse_message(self.git.message(verdict))
        state = f.get("Woolf-Verdict") or ("merged" if "Woolf-Version" in f else None)
        if state not in ("merged", "rejected", "withdrawn", "expired"):
            # a verdict ref exists, so no validator can record another: show it, never queue it
            pr.state, pr.reason = "quarantined", "the verdict ref carries no Woolf-Verdict or Woolf-Version trailer"
            return pr
        pr.state = state
        pr.reason = f.get("Woolf-Reason")
        pr.version = int_field(f, "Woolf-Version") if pr.state == "merged" else None
        pr.staleness = int_field(f, "Woolf-Staleness")
        pr.attenuation = float_field(f, "Woolf-Attenuation")
        pr.metrics_before = json_field(f, "Woolf-Metrics-Before")
        pr.metrics_after = json_field(f, "Woolf-Metrics-After")
        pr.timings = json_field(f, "Woolf-Timings")
        pr.validator = f.get("Woolf-Validator")
        retrain = json_field(f, "Woolf-Retrain")
        pr.retrain = retrain if isinstance(retrain, dict) else None
        return pr
