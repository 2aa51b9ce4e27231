"""Each window's loss of a version on a text the validator evaluates, kept per (version, text) across PRs and runs.

Usage (over the validator's context, validator/context.py):
    got = window_losses(ctx, main.commit, weights, data, [4, 9, 1])   # kept ones read, the rest evaluated and kept
    got = window_losses(ctx, None, candidate, data, idx)              # not a version: nothing is kept
    sequential(ctx)       # validators.eval = "sequential" and the workload measures windows
    hold(ctx, pr.id, main.commit, bench, losses)   # the gate: a candidate's losses on every benchmark window
    adopt(ctx, commit, pr.id, main.commit)         # after its push (publish.merge): the new version's now

Main's losses on the benchmark and on the scoring shards do not change while main does not: every PR
judged against the same main reads them here instead of evaluating main again, and a merged
candidate's losses (every window: the gate measured them) are the next main's. They are kept in
memory (the last KEEP entries) and in the validator's own work area, .woolf/validator/windows/ (the
last KEEP_FILES files), so a `woolf validate` run per PR does not evaluate main again either. The key
is the version's commit, the text's sha256, the workload's config and the device (evaluation on
another device or in another configuration differs in the last digits).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from woolf.protocol import layout
from woolf.storage.files import write_bytes_atomic
from woolf.validator.context import ValidatorContext
from woolf.workloads.base import describe_device
from woolf.workloads.features import WINDOWS, features_of

KEEP = 32  # (version, text) entries kept in memory
KEEP_FILES = 256  # files kept in .woolf/validator/windows/


@dataclass(frozen=True)
class Held:
    pr: str  # the PR whose candidate it is
    main: str  # the main commit it was merged onto (the same PR and main make the same candidate)
    key: str
    losses: dict[int, float]


@dataclass
class WindowStore:
    root: Path  # .woolf/validator/windows
    entries: OrderedDict[tuple[str, str], dict[int, float]] = field(default_factory=OrderedDict)
    held: Held | None = None

    def get(self, commit: str, key: str) -> dict[int, float]:
        got = self.entries.get((commit, key))
        if got is None:
            got = self._read(commit, key)
            self.entries[(commit, key)] = got
            while len(self.entries) > KEEP:
                self.entries.popitem(last=False)
        self.entries.move_to_end((commit, key))
        return got

    def save(self, commit: str, key: str) -> None:
        losses = self.entries.get((commit, key))
        if losses is None:
            return
        body = json.dumps({"commit": commit, "key": key, "losses": {str(i): x for i, x in losses.items()}})
        write_bytes_atomic(body.encode(), self._path(commit, key))
        files = sorted(self.root.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in files[:max(0, len(files) - KEEP_FILES)]:
            old.unlink(missing_ok=True)

    def _path(self, commit: str, key: str) -> Path:
        return self.root / f"{commit}-{key[:32]}.json"

    def _read(self, commit: str, key: str) -> dict[int, float]:
        """What an earlier run kept; anything unreadable or not this entry's is evaluated again."""
        try:
            data = json.loads(self._path(commit, key).read_text())
            if data.get("commit") != commit or data.get("key") != key:
                return {}
            return {int(i): float(x) for i, x in data["losses"].items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return {}


def sequential(ctx: ValidatorContext) -> bool:
    """`validators.eval = "sequential"`, and the workload measures windows (features.py WINDOWS) in the policy
    metric's units: the gate (paired.py) and scoring (seqscore.py) then measure a few windows at a time."""
    cfg = ctx.ledger.config
    if cfg.validators.eval != "sequential":
        return False
    wl = ctx.ledger.workload()
    return WINDOWS in features_of(wl) and cfg.policy.metric in getattr(wl, "LINEAR_METRICS", {})


def tokens_of(wl, texts: list[bytes]) -> dict:
    """{"tokens": what evaluating every window of ``texts`` predicts}, or {} when the workload does not say."""
    if WINDOWS not in features_of(wl):
        return {}
    return {"tokens": sum(n * size for n, size in (wl.windows(t) for t in texts))}


def store(ctx: ValidatorContext) -> WindowStore:
    if ctx.state.windows is None:
        ctx.state.windows = WindowStore(ctx.ledger.root / layout.WORK / "validator" / "windows")
    return ctx.state.windows


def text_key(ctx: ValidatorContext, data: bytes) -> str:
    """What a window's loss depends on besides the weights: the text, the workload's config, the device."""
    cfg = ctx.ledger.config.workload
    h = hashlib.sha256(b"woolf-windows\0" + hashlib.sha256(data).digest())
    h.update(json.dumps([cfg.name, cfg.params, describe_device(ctx.device)], sort_keys=True).encode())
    return h.hexdigest()


def window_losses(ctx: ValidatorContext, commit: str | None, weights, data: bytes, index: list[int]) -> list[float]:
    """The loss of each window in ``index`` of ``data`` under ``weights``, in that order: those of version
    ``commit`` already measured are read, the others evaluated (and kept, when ``commit`` names a version)."""
    wl = ctx.ledger.workload()
    if commit is None:
        return wl.window_losses(weights, data, index, ctx.device)
    key = text_key(ctx, data)
    st = store(ctx)
    known = st.get(commit, key)
    missing = [i for i in index if i not in known]
    if missing:
        known.update(zip(missing, wl.window_losses(weights, data, missing, ctx.device), strict=True))
        st.save(commit, key)
    return [known[i] for i in index]


def kept(ctx: ValidatorContext, commit: str, data: bytes) -> dict[int, float]:
    """Version ``commit``'s losses on ``data`` measured so far, by window."""
    return dict(store(ctx).get(commit, text_key(ctx, data)))


def hold(ctx: ValidatorContext, pr_id: str, main: str, data: bytes, losses: dict[int, float]) -> None:
    """PR ``pr_id``'s candidate on ``main``: its losses on every window of ``data``, until adopt() names its
    version (or the next hold replaces them)."""
    finite = all(math.isfinite(x) for x in losses.values())
    store(ctx).held = Held(pr_id, main, text_key(ctx, data), dict(losses)) if finite else None


def adopt(ctx: ValidatorContext, commit: str, pr_id: str, main: str) -> None:
    """Version ``commit`` merged PR ``pr_id`` onto ``main``: the losses held for that candidate are its own."""
    st = ctx.state.windows
    if st is None or st.held is None:
        return
    held, st.held = st.held, None
    if (held.pr, held.main) == (pr_id, main):
        st.get(commit, held.key).update(held.losses)
        st.save(commit, held.key)
