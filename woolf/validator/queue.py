"""The Validator: every open PR in queue order, one verdict each, lost races re-evaluated.

Usage:
    v = Validator(ledger, device="auto", name="ci-gpu-1")
    verdicts = v.run()                 # every open PR, in queue order
    v.watch(interval=2.0, stop=lambda: False, on_verdict=print)

The Validator is a queue over one ValidatorContext (woolf/validator/context.py): ``v.ctx``, with
its ledger, forge, device, name and state (``v.ledger`` ... ``v.state`` read it). One PR's steps are
plain functions over that context: step.py (evaluate, merge), quorum.py (vote_one), delta_load.py.
What the Validator remembers (the open PRs a pass read, caches, retry times, votes judged) is
one ValidatorState (woolf/validator/state.py): ``v.state``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time

from woolf.core.fairness import fair_order
from woolf.errors import (
    ForgeError,
    IntegrityError,
    RaceLostError,
    StorageError,
    WoolfError,
)
from woolf.forges import forge_for
from woolf.forges.base import PullRequest
from woolf.ledger.trust import require_validator_key
from woolf.protocol.rules.flood import signed_by_own_key
from woolf.protocol.signers import signers_text
from woolf.timing import Timer
from woolf.validator.context import ValidatorContext
from woolf.validator.downloads import DownloadTimes, fewest_tries_first
from woolf.validator.intake import Deferred, Pass, evict_rejected, signed_arrived
from woolf.validator.publish import merge
from woolf.validator.quorum import vote_one
from woolf.validator.stages import merged_deltas
from woolf.validator.state import Pending, ValidatorState
from woolf.validator.step import evaluate, fresh, verdict_trailers
from woolf.validator.verdict import Verdict
from woolf.workloads.base import resolve_device

ORIGIN_MAIN = "refs/remotes/origin/main"
MAX_RACES = 8
RETRY_AFTER = 60.0  # seconds before a PR that failed without a verdict is tried again by the same validator
# rejections pushed together in one atomic push (one run of the hub's hook), where the forge batches_verdicts
BATCH = 64
log = logging.getLogger("woolf.validator")


class Validator:
    def __init__(self, ledger, device: str = "auto", name: str | None = None, forge=None,
                 forge_kind: str | None = None, judge=None):
        """``judge``: how a vote's judgment is made (ValidatorContext.judge; None: quorum.judge)."""
        ledger.main_ref = ORIGIN_MAIN
        self.ctx = ValidatorContext(ledger, forge or forge_for(ledger, forge_kind), resolve_device(device),
                                    name or f"{socket.gethostname()}:{os.getpid()}",
                                    ValidatorState(),  # per pass and across passes: woolf/validator/state.py
                                    judge)
        require_validator_key(ledger, ledger.head())  # a missing key is this validator's error, not a PR's
        self._fetched = False  # the refs were fetched for this pass and nothing moved main since
        self.deferred: list[str] = []  # PRs the last pass put off (its keyless download budget was spent)

    @property
    def ledger(self):
        return self.ctx.ledger

    @property
    def forge(self):
        return self.ctx.forge

    @property
    def device(self) -> str:
        return self.ctx.device

    @property
    def name(self) -> str:
        return self.ctx.name

    @property
    def state(self) -> ValidatorState:
        return self.ctx.state

    # -- queue -----------------------------------------------------------------
    def run(self, ids: list[str] | None = None, on_verdict=None) -> list[Verdict]:
        """One pass over the open PRs in queue order; one PR's failure never ends the pass."""
        state = self.state
        self.ledger.fetch()  # once per pass: each PR's first try reads these refs (a pass is linear in PRs)
        self._fetched = True
        # list() syncs the forge, unless that fetch brought its PRs (the git-native forge: one fetch a pass)
        prs = sorted(self.forge.list(state="open", local_only=self.forge.prs_come_with_main), key=PullRequest.queue_key)
        state.open_snapshot = prs  # the queue as read: per-contributor limits and copies (screen.py)
        if self.ledger.config.queue.fair:
            prs = fair_order(prs)  # round-robin by contributor, then by receive time
        prs = self._signed_first(prs)  # a flood of keyless junk never delays contributors who sign
        for ref, why in self.forge.skipped:  # malformed refs: reported once, never queued
            if ref not in state.reported:
                state.reported.add(ref)
                log.warning("skipped malformed PR ref %r: %s", ref, why)
        queue = [pr.id for pr in prs]
        if ids:
            unknown = set(ids) - set(queue)
            for sub_id in sorted(unknown):
                self.forge.get(sub_id, fetch=False)  # raises for an unknown id
            queue = [i for i in queue if i in ids]
        if queue:  # the model must load on this machine (package, version, pinned files): no PR's fault
            self.ledger.workload()
        verdicts = []
        now = time.monotonic()

        def landed(done):
            for verdict in done:
                verdicts.append(verdict)
                if on_verdict:
                    on_verdict(verdict)

        state.batching = self.forge.batches_verdicts and self.ledger.config.validators.quorum == 1
        try:
            for sub_id in queue:  # when the forge received each PR, never the id's self-chosen timestamp
                if not ids and state.retry_at.get(sub_id, 0.0) > now:
                    continue  # failed without a verdict moments ago (its rejection could not be written): later
                verdict = self.validate_one(sub_id)
                landed([verdict] if verdict is not None else [])
                run = state.keyless  # a signed PR pushed meanwhile ends a keyless stretch (intake.py)
                if run is not None and sub_id not in run.signed and signed_arrived(self.ctx, run, set(queue)):
                    self._fetched = False
                    break
                if len(state.pending) >= BATCH:
                    landed(self.flush())
            landed(self.flush())
        except BaseException:
            with contextlib.suppress(WoolfError):
                self.flush()  # the rejections decided before the failure are not lost
            raise
        finally:
            state.batching = False
            self.deferred = list(dict.fromkeys(state.keyless.budget.deferred)) if state.keyless else []
            state.keyless = None
        return verdicts

    def flush(self) -> list[Verdict]:
        """Push the rejections waiting in state.pending: one atomic push, or one each when that loses a
        race (another validator decided one of them) or the hub refuses one; the verdicts that landed."""
        pending = self.state.take_pending()
        if not pending:
            return []
        try:
            self.forge.push_verdicts([(p.commit, p.ref) for p in pending])
            return [p.verdict for p in pending]
        except (RaceLostError, ForgeError):
            pass
        done = []
        for p in pending:
            try:
                self.forge.push_verdicts([(p.commit, p.ref)])
            except RaceLostError:
                continue  # another validator decided it meanwhile
            except ForgeError as exc:  # this one refused or unreachable: the others still land
                log.warning("%s: its rejection could not be pushed (%s); retried later", p.verdict.id, exc.message)
                self.state.retry_later(p.verdict.id, RETRY_AFTER)
                continue
            done.append(p.verdict)
        return done

    def watch(self, interval: float = 2.0, stop=lambda: False, on_verdict=None, on_idle=None) -> list[Verdict]:
        """Validate passes until ``stop()``; ``on_idle()`` before each sleep after a pass with no verdict."""
        verdicts: list[Verdict] = []
        while not stop():
            try:
                done = self.run(on_verdict=on_verdict)
            except WoolfError as exc:  # the forge or storage is unreachable for now: poll again
                log.warning("validator pass failed, retrying in %gs: %s", interval, exc)
                done = []
            verdicts += done
            if not done:
                if on_idle is not None:
                    on_idle()
                time.sleep(interval)
        return verdicts

    # -- one PR ----------------------------------------------------------------
    def validate_one(self, sub_id: str) -> Verdict | None:
        """The verdict this validator recorded, or None: another validator got there first, or the
        PR lost MAX_RACES races in a row and stays in the queue for the next pass.

        Any failure while handling the PR (a parser's TypeError, a RecursionError, a git error on
        hostile objects) becomes a rejection naming the failure, never the end of the run. Only a
        failure of the ledger itself (its storage, forge or outer state: StorageError, ForgeError,
        IntegrityError) ends the pass, since every PR would fail alike; `watch` retries it.
        """
        if self.ledger.config.validators.quorum > 1:
            return vote_one(self.ctx, sub_id)  # k signed votes must agree (woolf/validator/quorum.py)
        pr, timer = None, Timer()
        try:
            for _ in range(MAX_RACES):
                timer = Timer()
                with timer("fetch"):
                    pr, main = fresh(self.ctx, sub_id, fetch=not self._fetched)
                    self._fetched = False  # a retry (a lost race) fetches again
                    if pr.state != "open":
                        return None
                verdict, step = evaluate(self.ctx, pr, main, timer, write_ahead=True)  # merge() publishes it
                if not verdict.accepted:  # nothing a rejected PR brought stays (validator/intake.py)
                    evict_rejected(self.ledger, pr, merged_deltas(self.ctx, main))
                if not verdict.accepted and self.state.batching:  # pushed with others by run(): one hook run
                    self._fetched = True  # a rejection moves nothing the next PR is judged against
                    with timer("push"):
                        commit, ref = self.forge.verdict_commit(pr, "rejected", verdict.reason,
                                                                verdict_trailers(self.ctx, verdict, timer))
                    verdict.timings = dict(timer)
                    self.state.pending.append(Pending(verdict, commit, ref))
                    return None
                if not verdict.accepted:
                    self._fetched = True  # a rejection moves nothing the next PR is judged against
                    with timer("push"):
                        try:
                            self.forge.reject(pr, verdict.reason, verdict_trailers(self.ctx, verdict, timer))
                        except RaceLostError:
                            return None
                    verdict.timings = dict(timer)
                    return verdict
                try:
                    merge(self.ctx, pr, main, verdict, step, timer)
                    return verdict
                except RaceLostError:
                    continue  # main moved or another validator decided: re-fetch, re-check, re-evaluate
            log.warning("%s: lost %d races in a row; it stays in the queue for the next pass", sub_id, MAX_RACES)
            return None
        except Deferred as exc:  # this pass's keyless budget is spent; the PR waits, unjudged
            log.info("%s", exc.message)
            return None
        except (StorageError, ForgeError, IntegrityError):
            raise  # the ledger's own storage, forge or state failed, not the PR: this pass stops (watch retries)
        except Exception as exc:  # noqa: BLE001 - one hostile PR must never stop the queue
            log.warning("%s: validation failed with %s: %s", sub_id, type(exc).__name__, str(exc)[:400])
            if pr is None or pr.state != "open":
                self.state.retry_later(sub_id, RETRY_AFTER)
                return None
            verdict = Verdict(pr.id, False, "rejected",
                              f"the validator could not process this PR ({type(exc).__name__}); "
                              "it is rejected so that the queue goes on", pr.contributor, pr.base_version)
            evict_rejected(self.ledger, pr, self.state.merged.sha256s if self.state.merged else set())
            try:
                self.forge.reject(pr, verdict.reason, verdict_trailers(self.ctx, verdict, timer))
            except Exception as again:  # noqa: BLE001 - the verdict could not be written either
                log.warning("%s: rejection not recorded (%s); retried in %gs", sub_id, again, RETRY_AFTER)
                self.state.retry_later(sub_id, RETRY_AFTER)
                return None
            verdict.timings = dict(timer)
            return verdict

    def _signed_first(self, prs: list) -> list:
        """``prs`` with those signed by the listed key of the contributor they name first (each group
        in queue order): one batch of signature checks (unsigned heads cost none)."""
        text = signers_text(self.ledger.git, self.ledger.git.rev_parse(ORIGIN_MAIN) or "HEAD")
        signed = signed_by_own_key(self.ledger.git, {p.id: p.head for p in prs}, text)
        quorum = self.ledger.config.validators.quorum > 1  # keyless downloads share a budget
        if not isinstance(self.state.keyless_spent, DownloadTimes):  # kept across processes (validator/downloads.py)
            self.state.keyless_spent = DownloadTimes.open(self.ledger.root)
        self.state.keyless_spent.keep(prs)
        self.state.keyless = None if quorum else Pass(signed)  # per pass (validator/intake.py)
        # keyless PRs: fewest download tries first (validator/downloads.py), so slow ones cannot hold the budget
        return [p for p in prs if p.id in signed] + fewest_tries_first([p for p in prs if p.id not in signed],
                                                                        self.state.keyless_spent)
