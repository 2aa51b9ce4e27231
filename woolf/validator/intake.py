"""What a PR may bring into the validator: bytes bounded by the model's
spec before any download, time and bytes of keyless downloads out of one budget per pass, and
nothing a rejected PR brought left in the cache.

Usage:
    bound = declared_bound(declared, model_spec, limits)     # most bytes a delta of this kind can take
    check_declared(declared, model_spec, limits)             # raises Rejected before any download
    state.keyless = Pass(signed_ids)                         # Validator.run, once per pass (quorum 1)
    if signed_arrived(ctx, state.keyless, queued_ids): ...   # end the pass: a signed PR waits
    with download_budget(state, adm, delta_timeout, cached) as deadline:   # raises Deferred
        ...download within deadline seconds...
    evict_rejected(ledger, pr, merged_sha256s)               # the rejected PR's delta leaves the cache

Each kind bounds its own files (storage/kinds/ ``size_bound``): a dense delta is the model's tensors,
dtype for dtype and shape for shape, so its file is at most 8 bytes, a header of at most
`limits.max_header_bytes`, and the tensors' bytes; a compressed kind's bound follows from its k.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time

from woolf.errors import Rejected, WoolfError
from woolf.protocol.rules.flood import signed_by_own_key
from woolf.protocol.signers import signers_text
from woolf.storage.kinds import kind_for
from woolf.validator.downloads import record, spent_key

log = logging.getLogger("woolf.validator")
KEYLESS_SECONDS = 30.0  # download time all keyless PRs of one pass may spend together
KEYLESS_BYTES = 8 << 30  # bytes all keyless PRs of one pass may download together
PREEMPT_EVERY = 10.0  # seconds of keyless work between two looks for newly pushed signed PRs
ORIGIN_MAIN = "refs/remotes/origin/main"
_MD5 = re.compile(r"^[0-9a-f]{32}$")


def declared_bound(declared: dict, model_spec: dict, limits) -> int:
    return kind_for(declared).size_bound(declared, model_spec, limits)


def check_declared(declared: dict, model_spec: dict, limits) -> None:
    """A delta that declares more bytes than its kind can take for this model is refused unread."""
    kind = kind_for(declared)
    bound = kind.size_bound(declared, model_spec, limits)
    if declared["size"] > bound:
        raise Rejected(f"delta declares {declared['size']} bytes; a {kind.name} delta of this model"
                       f"{kind.bound_words} is at most {bound} (refused before download)")


class Deferred(WoolfError):
    """This pass's keyless budget is spent: the PR waits for the next pass, unjudged (not rejected)."""


class KeylessBudget:
    """Download time and bytes that keyless PRs of one pass share (signed PRs never draw on it)."""

    def __init__(self, seconds: float | None = None, max_bytes: int | None = None):
        # the module's constants as they are when a pass begins (None), so a test can shorten them
        self.seconds = KEYLESS_SECONDS if seconds is None else seconds
        self.max_bytes = KEYLESS_BYTES if max_bytes is None else max_bytes
        self.spent_s, self.spent_bytes = 0.0, 0
        self.deferred: list[str] = []  # PR ids put off to a later pass

    def left(self) -> float:
        return max(0.0, self.seconds - self.spent_s)

    def deadline(self, timeout: float, size: int) -> float:
        """The seconds a keyless download of ``size`` bytes may take now; Deferred when none is left."""
        if self.left() <= 0 or self.spent_bytes + size > self.max_bytes:
            raise Deferred(f"this pass's keyless download budget is spent ({self.spent_s:.0f}s of "
                           f"{self.seconds:g}s, {self.spent_bytes} of {self.max_bytes} bytes)")
        return min(timeout, self.left())

    def spend(self, seconds: float, nbytes: int) -> None:
        self.spent_s += seconds
        self.spent_bytes += nbytes


class Pass:
    """What one pass of Validator.run knows about its keyless PRs (ValidatorState.keyless)."""

    def __init__(self, signed: set[str], budget: KeylessBudget | None = None):
        self.signed = signed  # ids of the PRs signed by their contributor's own key: never budgeted
        self.budget = budget or KeylessBudget()
        self.started = time.monotonic()
        self.checked = self.started  # when run() last looked for newly pushed signed PRs


@contextlib.contextmanager
def download_budget(state, adm, timeout: float, cached: bool):
    """The seconds this PR's download may take (a context manager around the download).

    A signed PR, or any PR outside a pass (CI jobs, quorum), gets ``timeout`` (forge.delta_timeout).
    A keyless PR gets its share of the pass's KeylessBudget (Deferred when none is left; nothing is
    downloaded). A download cut short by the budget, not by its own timeout, is Deferred to the next
    pass; a PR's downloads over all passes never take more than ``timeout`` in all (then the timeout's
    rejection stands). ``cached``: the object is in the cache already: nothing is downloaded, nothing drawn.
    The seconds a keyless PR's downloads took are kept per PR and delta, on disk when
    ``state.keyless_spent`` is a validator/downloads.py DownloadTimes (Validator.run makes one)."""
    run = getattr(state, "keyless", None)
    sub_id = adm.meta["id"]
    if run is None or sub_id in run.signed or cached:  # cached: nothing to download, nothing drawn
        yield timeout
        return
    key = spent_key(sub_id, adm.meta["delta"].get("sha256"))  # kept on disk (validator/downloads.py)
    spent = state.keyless_spent.get(key, 0.0)
    size = int(adm.meta["delta"]["size"])
    try:
        deadline = run.budget.deadline(max(0.0, timeout - spent), size)
    except Deferred:
        run.budget.deferred.append(sub_id)
        raise
    t0 = time.monotonic()
    try:
        yield deadline
    except (WoolfError, OSError):
        took = time.monotonic() - t0
        record(state.keyless_spent, key, took)
        cut = deadline < timeout - spent and took >= deadline * 0.9
        if cut:
            run.budget.spend(took, size)
            run.budget.deferred.append(sub_id)
            raise Deferred(f"{sub_id}: its download was cut by this pass's keyless budget "
                           f"({spent + took:.0f}s of {timeout:g}s used); it is tried again next pass") from None
        run.budget.spend(took, size)
        raise
    run.budget.spend(time.monotonic() - t0, size)


def evict_rejected(ledger, pr, merged_sha256s: set[str]) -> bool:
    """Remove the rejected ``pr``'s delta from this validator's cache (unless a merged version has the
    same bytes): a rejected PR leaves nothing on the validator's disk. True when something went."""
    d = (getattr(pr, "submission", None) or {}).get("delta")
    if not isinstance(d, dict) or not isinstance(d.get("md5"), str) or not _MD5.match(d["md5"]):
        return False
    if d.get("sha256") in merged_sha256s:
        return False
    path = ledger.store.cache_path(d["md5"])
    try:
        if path.is_file() or path.is_symlink():
            path.unlink()
            log.info("%s: its delta %s left the cache (rejected)", pr.id, d["md5"])
            return True
    except OSError as exc:
        log.warning("%s: its delta could not leave the cache (%s)", pr.id, exc)
    return False


def signed_arrived(ctx, run: Pass, queued: set[str]) -> bool:
    """Whether a PR signed by its contributor's own key was pushed since the pass read the queue (looked
    for at most every PREEMPT_EVERY seconds of keyless work): the pass then ends, and the next one
    serves it first. Signed PRs never wait behind a pass of keyless ones."""
    now = time.monotonic()
    if now - run.checked < PREEMPT_EVERY:
        return False
    run.checked = now
    fresh = {p.id: p.head for p in ctx.forge.list(state="open") if p.id not in queued}
    if not fresh:
        return False
    git = ctx.ledger.git
    return bool(signed_by_own_key(git, fresh, signers_text(git, git.rev_parse(ORIGIN_MAIN) or "HEAD")))
