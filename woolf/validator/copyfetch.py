"""Open PRs' URL deltas brought here for the copy check: all at once, once a pass, none able to hold up another.

Usage (validator/copyindex.py, before the earlier open PRs' bytes are proven and sketched):
    fetch_for_copies(ledger, state, index, needed, every)   # [(pr, pointer, declared delta)]: URL deltas only

A PR whose delta is a URL (`woolf submit --delta-url-base`) is downloaded when it is judged; a signed copy
of it judged first used to find nothing to compare with, merged, and the original was then refused as a
copy of its own copy. So when a copy check meets an earlier open PR whose URL delta is not here yet,
every open PR's URL delta that is not here is downloaded, each in its own thread, all within
COPY_FETCH_SECONDS of wall time together and COPY_FETCH_BYTES: a slow or silent URL holds its own thread
and no other's, and the pass waits for this at most once. The bytes go to the cache under their md5
(md5-verified, size-capped: storage/dvcstore.py fetch_url), where the PR's own judgment finds them
later (then drawing nothing on the keyless budget). A download that does not finish counts as one try
of that PR's (validator/downloads.py: its seconds add up to forge.delta_timeout over all passes, and
fewest tries go first when the byte cap chooses); it is tried again next pass, never twice in one.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from woolf.errors import WoolfError
from woolf.validator.downloads import key_of, record

log = logging.getLogger("woolf.validator")
COPY_FETCH_SECONDS = 30.0  # wall seconds one pass's copy-check downloads take together, at most
COPY_FETCH_BYTES = 8 << 30  # bytes they bring in one pass, at most


def _cached(ledger, pointer) -> bool:
    path = ledger.store.cache_path(pointer.md5)
    return path.is_file() and path.stat().st_size == pointer.size


def _jobs(ledger, state, index, items: list) -> list:
    """The (pr, pointer, declared) to download now: not here, not tried this pass, some allowance left;
    fewest tries first (then queue order), as many as COPY_FETCH_BYTES holds."""
    spent = state.keyless_spent
    tries = getattr(spent, "tries", {})
    todo = [(p, ptr, d) for p, ptr, d in items if ptr.md5 not in index.fetch_tried and not _cached(ledger, ptr)
            and spent.get(key_of(p), 0.0) < ledger.config.forge.delta_timeout]
    todo.sort(key=lambda job: tries.get(key_of(job[0]), 0))
    jobs, total, md5s = [], 0, set()
    for job in todo:
        if job[1].md5 not in md5s and total + job[1].size <= COPY_FETCH_BYTES:  # one download per object
            jobs.append(job)
            total += job[1].size
            md5s.add(job[1].md5)
    return jobs


def fetch_for_copies(ledger, state, index, needed: list, every: list) -> None:
    """When a URL delta among ``needed`` (the earlier open PRs' [(pr, pointer, declared)]) is not here yet,
    download it and every other of ``every`` (all open PRs' URL deltas) not here yet, at once."""
    if index.fetch_pass is not state.open_snapshot:  # a new pass: every URL may be tried once again
        index.fetch_pass, index.fetch_tried = state.open_snapshot, set()
    if not any(ptr.md5 not in index.fetch_tried and not _cached(ledger, ptr) for _, ptr, _ in needed):
        return
    seen = {p.id for p, _, _ in needed}
    every = list(needed) + [job for job in every if job[0].id not in seen]  # the queue's at once: one wait a pass
    jobs = _jobs(ledger, state, index, every)
    index.fetch_tried.update(ptr.md5 for _, ptr, _ in every)  # once a pass, those the byte cap left out too
    if not jobs:
        return
    cfg = ledger.config
    t_end = time.monotonic() + COPY_FETCH_SECONDS

    def one(job):
        p, ptr, d = job
        allowance = cfg.forge.delta_timeout - state.keyless_spent.get(key_of(p), 0.0)
        deadline = max(0.0, min(allowance, t_end - time.monotonic()))
        t0 = time.monotonic()
        try:
            ledger.store.fetch_url(ptr, d["url"], replace(cfg.forge, delta_timeout=deadline),
                                   cfg.limits.max_delta_bytes)
            return p, None, time.monotonic() - t0
        except (WoolfError, OSError) as exc:
            return p, getattr(exc, "message", str(exc)), time.monotonic() - t0

    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="woolf-copyfetch") as pool:
        done = list(pool.map(one, jobs))
    for p, problem, took in done:  # recorded here, in one thread: the times file is written once per try
        if problem is not None:
            log.info("copy check: %s's delta URL gave no file this pass (%s)", p.id, problem[:200])
            key = key_of(p)
            if key:
                record(state.keyless_spent, key, took)
