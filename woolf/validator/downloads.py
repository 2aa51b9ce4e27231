"""What each PR's delta downloads have cost so far, over every pass and every process of one validator.

Usage (validator/queue.py and intake.py; ValidatorState.keyless_spent holds one):
    times = DownloadTimes.open(ledger.root)        # .woolf/validator/download-seconds.json
    key = spent_key(pr_id, delta_sha256)           # per PR and per delta: a new delta starts from zero
    times.get(key, 0.0)                            # seconds spent so far
    times.record(key, seconds)                     # one more try: written to disk at once
    times.keep(open_prs)                           # PRs no longer open are forgotten
    queue = fewest_tries_first(keyless_prs, times) # who has had fewest tries goes first (ties: queue order)

Each pass gives keyless PRs one download budget (validator/intake.py). Remembered only in memory, a new
`woolf validate --all` started the slow PRs from zero and the first of them took the whole budget again,
pass after pass, ahead of an honest PR queued behind. Kept on disk and served fewest-tries-first (a try:
a download that drew on the budget and did not finish), each keyless PR received before another has its
try first, and a PR pushed later never goes ahead of one that has had as few: a keyless PR is tried within
as many passes as keyless PRs were received before it, plus one. A PR's downloads over all passes still
stop at forge.delta_timeout in all (intake.download_budget).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from woolf.protocol import layout
from woolf.storage.files import write_bytes_atomic

log = logging.getLogger("woolf.validator")
FILE = "download-seconds.json"
MAX_BYTES = 4 << 20  # this validator's own file, bounded anyway: a larger one is started afresh


def spent_key(sub_id: str, sha256) -> str:
    return f"{sub_id} {sha256}"


def key_of(pr) -> str | None:
    d = (getattr(pr, "submission", None) or {}).get("delta")
    sha = d.get("sha256") if isinstance(d, dict) else None
    return spent_key(pr.id, sha) if isinstance(sha, str) else None


def _entry(v) -> tuple[float, int] | None:
    if not isinstance(v, dict):
        return None
    s, n = v.get("seconds"), v.get("tries")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
        return None
    return float(s), n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 1


class DownloadTimes(dict):
    """{spent_key: seconds}, and ``tries`` {spent_key: count}; each change written to ``path`` at once."""

    def __init__(self, path: Path | None = None, data: dict | None = None, tries: dict | None = None):
        super().__init__(data or {})
        self.path, self.tries = path, dict(tries or {})

    @classmethod
    def open(cls, root: Path) -> DownloadTimes:
        path = Path(root) / layout.WORK / "validator" / FILE
        data, tries = {}, {}
        try:
            if path.is_file() and path.stat().st_size <= MAX_BYTES:
                raw = json.loads(path.read_bytes())
                for k, v in (raw.items() if isinstance(raw, dict) else ()):
                    if isinstance(k, str) and (e := _entry(v)):
                        data[k], tries[k] = e
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): download times start from zero", path, exc)
        return cls(path, data, tries)

    def record(self, key: str, seconds: float) -> None:
        """One more try of ``key``'s download, which took ``seconds``."""
        self[key] = self.get(key, 0.0) + max(0.0, seconds)
        self.tries[key] = self.tries.get(key, 0) + 1
        self._write()

    def keep(self, prs) -> None:
        """Forget every PR not among ``prs`` (the open PRs a pass read)."""
        wanted = {k for k in (key_of(p) for p in prs) if k}
        gone = [k for k in self if k not in wanted]
        for k in gone:
            del self[k]
            self.tries.pop(k, None)
        if gone:
            self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        body = {k: {"seconds": s, "tries": self.tries.get(k, 1)} for k, s in self.items()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(json.dumps(body, sort_keys=True).encode(), self.path)
        except OSError as exc:  # a full disk: the times hold in memory for this process
            log.warning("download times not written to %s (%s)", self.path, exc)


def record(times: dict, key: str, seconds: float) -> None:
    """One more try of ``key`` in ``times`` (a DownloadTimes, or a plain {key: seconds})."""
    if isinstance(times, DownloadTimes):
        times.record(key, seconds)
    else:
        times[key] = times.get(key, 0.0) + seconds


def fewest_tries_first(prs: list, times: dict) -> list:
    """``prs`` with those whose downloads have had fewest tries first, ties in their given order."""
    tries = getattr(times, "tries", {})
    return sorted(prs, key=lambda p: tries.get(key_of(p), 0))
