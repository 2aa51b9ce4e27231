"""The validator's side of a quorum: evaluate, vote, tally, and settle when k votes agree.

Usage (through Validator, which mixes this in; used when validators.quorum > 1):
    verdict = validator.vote_one(sub_id)    # the verdict this validator wrote, or None (pending, or
                                            # settled by another member of the quorum)

One PR, one pass: fetch; if this validator has no vote on the PR against main's
current head, evaluate it (the same checks, merge rule and gate as a single
validator) and push a signed vote; tally the votes cast against main's head
(woolf/protocol/tally.py); when k agree, a validator of that quorum writes the
verdict naming the votes (`Woolf-Votes`): a merge by the same atomic push as
always, or a rejection. A vote that completes a quorum is pushed in that same
atomic push (one push, one run of the hub's hook, instead of two). Otherwise the PR stays open; after
`validators.vote_timeout` seconds from its first vote (the vote commit's own
timestamp, which a validator signed) it is settled as `expired`.

A delta that storage cannot serve is no vote while the PR is younger than
`validators.vote_timeout` (since this validator received it), then a reject
vote naming that, so such a PR is settled (rejected by quorum, or expired)
instead of staying open forever. Any failure of the ledger's own storage or
forge is no vote: the PR stays open and is retried. Any other failure while
judging a PR is a reject vote naming it.

CI (woolf/validator/ci.py): `vote_one(sub_id, fixed=(main, verdict, step, sha, head))` votes a
verdict judged elsewhere (a re-checked verdict record) and never evaluates; if main
moved it returns a "requeued" verdict, and a vote that does not complete a quorum
returns a "voted" verdict (after one more look, in case another runner voted at once).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from woolf.errors import ForgeError, IntegrityError, RaceLostError, StorageError, UsageError
from woolf.forges.local import LocalForge
from woolf.git.keys import public_of
from woolf.protocol import layout
from woolf.protocol.signers import Signers, signers_text
from woolf.protocol.tally import Ballot, tally
from woolf.protocol.votes import make_vote, push_vote, read_votes, vote_ref
from woolf.storage.writer import sha256_of
from woolf.timing import Timer
from woolf.validator.verdict import Verdict, _failpoint

log = logging.getLogger("woolf.validator")
RETRY_UNAVAILABLE = 10.0  # seconds before a PR whose delta storage could not serve is tried again
MAX_ROUNDS = 8
KEEP_STEPS = 2  # candidates kept in memory for PRs still waiting for votes (the others are made again)


def candidate_sha256(step) -> str:
    """sha256 of the file the merge will upload, hashed from the tensors' memory (no serialised copy;
    woolf/storage/writer.py lays out the same bytes as safetensors, which save_atomic writes)."""
    return sha256_of(step.candidate)


class QuorumStep:
    """Voting and settling; needs Validator's ledger, forge, name, fresh, evaluate, merge, _fields."""

    _voter_name: str | None = None

    def voter(self, main) -> str:
        """The name this validator votes under: its key's name in allowed_signers (signed ledgers)."""
        if self._voter_name:
            return self._voter_name

        text = signers_text(self.ledger.git, main.commit)
        if text is None:
            name = self.name
        else:
            key = public_of(self.ledger.git.sign_key).split()[1]
            name = next((s.name for s in Signers.parse(text.decode(errors="replace")).entries
                         if s.key == key and "validator" in s.roles), None)
        if not name or not layout.CONTRIBUTOR.match(name):
            raise UsageError(f"cannot vote as {name!r}: a voter is one plain name",
                             hint="pass --name NAME (lower-case letters, digits, . _ -)")
        self._voter_name = name
        return name

    def _judge(self, pr, main, timer: Timer) -> tuple[Verdict | None, object, str | None]:
        """(verdict, merge step, candidate sha256); verdict None when the delta was unavailable."""
        try:
            verdict, step = self.evaluate(pr, main, timer)
        except (StorageError, ForgeError, IntegrityError):
            raise  # the ledger's own storage or forge: this pass stops, nothing is voted
        except Exception as exc:  # noqa: BLE001 - one hostile PR must never stop the queue
            verdict, step = Verdict(pr.id, False, "rejected", f"the validator could not process this PR "
                                    f"({type(exc).__name__})", pr.contributor, pr.base_version), None
        if not verdict.accepted and verdict.reason.startswith("delta object unavailable"):
            age, limit = self._unavailable_for(pr), self.ledger.config.validators.vote_timeout
            if age < limit:
                return None, None, None  # storage could not serve it now: retried, not rejected
            verdict.reason = (f"{verdict.reason} (for {age:.0f} s since this validator received the PR, "
                              f"over validators.vote_timeout {limit:g} s)")  # a reject vote: it gets settled
        with timer("vote"):  # the candidate's hash, which the vote carries
            sha = candidate_sha256(step) if step is not None else None
        return verdict, step, sha

    def _unavailable_for(self, pr) -> float:
        """Seconds since this validator received ``pr`` (its first sight of the head ref, kept in the
        reflog across restarts; else the first time it found the delta unavailable)."""
        if not hasattr(self, "_unavailable_since"):
            self._unavailable_since: dict[str, float] = {}
        first = self._unavailable_since.setdefault(pr.id, time.time())
        if isinstance(pr.received, (int, float)):
            first = min(first, float(pr.received))
        return time.time() - first

    def _vote(self, pr, main, verdict: Verdict, sha: str | None, timer: Timer) -> tuple[Ballot, str | None]:
        fields = {"Woolf-Vote": "accept" if verdict.accepted else "reject",
                  "Woolf-Candidate-Sha256": sha if verdict.accepted else None,
                  "Woolf-Reason": " ".join(verdict.reason.split())[:1000],
                  **self._fields(verdict, timer)}
        fields.pop("Woolf-Validator", None)
        with timer("vote"):
            return make_vote(self.ledger, pr, main.commit, self.voter(main), fields,
                             f"woolf: vote {fields['Woolf-Vote']} {pr.id}")

    def vote_one(self, sub_id: str, fixed: tuple | None = None) -> Verdict | None:
        """_vote_one, where a failure on one PR (not the ledger's own) is logged and retried later,
        never the end of the pass: the PRs behind it still get their votes. A vote from a CI record
        (``fixed``) is one PR's job: its failure is the job's."""
        if fixed is not None:
            return self._vote_one(sub_id, fixed)
        try:
            return self._vote_one(sub_id)
        except (StorageError, ForgeError, IntegrityError):
            raise  # the ledger's own storage or forge: this pass stops, as in validate_one
        except Exception as exc:  # noqa: BLE001 - one hostile PR must never stop the queue
            log.warning("%s: voting failed with %s: %s; retried later", sub_id, type(exc).__name__, str(exc)[:400])
            self._retry_at[sub_id] = time.monotonic() + RETRY_UNAVAILABLE * 6
            return None

    def _vote_one(self, sub_id: str, fixed: tuple | None = None) -> Verdict | None:
        if not hasattr(self, "_judged"):
            self._judged: dict[str, tuple] = {}  # PR id -> (main commit, verdict, step, candidate sha)
            self._ignored_votes: set[str] = set()
        looked_again = False
        for _ in range(MAX_ROUNDS):
            pushed = False
            timer = Timer(fixed[1].timings if fixed else {})  # a record's vote carries its evaluation's timings
            with timer("fetch"):
                pr, main = self.fresh(sub_id)
                if pr.state != "open":
                    self._judged.pop(sub_id, None)
                    return None
            q, me = self.ledger.config.validators, self.voter(main)
            with timer("vote"):  # reading and verifying the others' votes
                ballots, ignored = read_votes(self.ledger.git, pr.id, signers_text(self.ledger.git, main.commit),
                                              self.ledger.config.policy.metric)
            for ref, why in ignored:
                if f"{ref}{why}" not in self._ignored_votes:
                    self._ignored_votes.add(f"{ref}{why}")
                    log.warning("%s: ignored vote %s: %s", sub_id, ref, why)
            current = [b for b in ballots if b.main == main.commit]
            mine = next((b for b in current if b.validator == me), None)
            judged = self._judged.get(sub_id)
            if fixed is not None:  # (main, verdict, step, sha, head) from a re-checked CI record
                if fixed[4] != pr.head:
                    return requeued(pr, "the PR's head moved since evaluation")
                if fixed[0] != main.commit:
                    return requeued(pr, "main moved since evaluation")
                judged = fixed[:4]
            elif judged is None or judged[0] != main.commit:
                verdict, step, sha = self._judge(pr, main, timer)
                if verdict is None:
                    self._retry_at[sub_id] = time.monotonic() + RETRY_UNAVAILABLE
                    log.warning("%s: its delta is unavailable in storage now; no vote, retried", sub_id)
                    return None
                judged = self._judged[sub_id] = (main.commit, verdict, step, sha)
                kept = [i for i, j in self._judged.items() if i != sub_id and j[2] is not None]
                for other in kept[:max(0, len(kept) - KEEP_STEPS)]:
                    self._judged[other] = (*self._judged[other][:2], None, self._judged[other][3])  # memory
            _, verdict, step, sha = judged
            want = "accept" if verdict.accepted else "reject"
            unpushed = None  # (ballot, old tip): this validator's new vote, not pushed yet
            if mine is None or mine.decision != want or mine.candidate != (sha if verdict.accepted else None):
                mine, old = self._vote(pr, main, verdict, sha, timer)
                unpushed = (mine, old)
                current = [b for b in current if b.validator != me] + [mine]
            out = tally(current, q.quorum, q.epsilon)
            if out.state == "merged" and step is None and verdict.accepted and unpushed is None \
                    and me in {b.validator for b in out.votes}:
                verdict, step, sha = self._judge(pr, main, timer)  # its candidate was dropped: make it again
                if verdict is None or sha != out.candidate:
                    return None
            settles = (out.state != "pending" and me in {b.validator for b in out.votes}
                       and (out.state == "rejected" or step is not None))
            if unpushed and not (settles and isinstance(self.forge, LocalForge)):
                try:  # the vote goes alone; when it completes a quorum it rides in the settling push below
                    with timer("vote"):
                        push_vote(self.ledger, pr, *unpushed)
                except RaceLostError:
                    continue
                unpushed, pushed = None, True

                _failpoint("after-vote")
                if hasattr(self.forge, "vote_status"):  # GitHub: the vote shows on the PR, one status per validator
                    self.forge.vote_status(pr, me, mine.decision, verdict.reason)
            if out.state == "pending":
                if fixed is not None and pushed and not looked_again:
                    looked_again = True  # another runner may have voted at the same moment: look once more
                    continue
                expired = self._maybe_expire(pr, ballots, q, verdict, timer)
                if expired is not None or fixed is None:
                    return expired
                return _voted(pr, verdict, mine, q.quorum)
            if not settles:  # a member of the quorum that holds the candidate writes the verdict
                return None if fixed is None else _voted(pr, verdict, mine, q.quorum)
            extra = {"Woolf-Votes": [b.commit for b in out.votes], "Woolf-Main": main.commit}
            also = [(unpushed[0].commit, vote_ref(pr.id, me), unpushed[1])] if unpushed else None
            try:
                if out.state == "rejected":
                    with timer("push"):
                        self.forge.reject(pr, verdict.reason, {**self._fields(verdict, timer), **extra},
                                          **({"also": also} if also else {}))
                else:
                    self.merge(pr, main, verdict, step, timer, extra={"Woolf-Votes": extra["Woolf-Votes"]},
                               also=also)
            except RaceLostError:
                continue  # main moved or another member settled it: re-fetch and look again
            verdict.timings = dict(timer)
            self._judged.pop(sub_id, None)
            return verdict
        return None

    def _maybe_expire(self, pr, ballots, q, verdict: Verdict, timer: Timer) -> Verdict | None:
        if not ballots or not hasattr(self.forge, "expire"):
            return None
        first = min(int(t) for t in self.ledger.git.out(
            "log", "--no-walk=unsorted", "--format=%ct", *(b.commit for b in ballots)).split())
        if time.time() - first < q.vote_timeout:
            return None
        reason = (f"no quorum of {q.quorum} agreeing votes within {q.vote_timeout:g} s of the first vote "
                  f"({len(ballots)} vote(s) cast)")
        try:
            self.forge.expire(pr, reason, {"Woolf-Validator": self.name, "Woolf-Votes": [b.commit for b in ballots]})
        except RaceLostError:
            return None
        self._judged.pop(pr.id, None)

        return Verdict(pr.id, False, "expired", reason, verdict.contributor, verdict.base_version)


def requeued(pr, why: str) -> Verdict:
    return Verdict(pr.id, False, "requeued", f"{why}; it stays open and is validated again "
                   "(next push to the PR, or the scheduled sweeper)", pr.contributor, pr.base_version)


def _voted(pr, verdict: Verdict, mine, k: int) -> Verdict:
    """This validator's vote is cast and counted; the PR waits for the quorum's other votes."""
    return replace(verdict, accepted=False, state="voted",
                   reason=f"voted {mine.decision} ({verdict.reason}); waiting for {k} agreeing votes")
