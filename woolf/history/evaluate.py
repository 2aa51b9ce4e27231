"""Evaluate any version with the ledger's workload, on its benchmark or any text file, cached.

Usage:
    ev = Evaluator(ledger, benchmark=Path("poems.txt"), device="cpu")   # None: the ledger's benchmark
    ev.metrics(ledger.show(3))          # {"loss": ..., "bpb": ...}; ev.evaluations, ev.cache_hits

Each version is evaluated with the workload its own config names (a change
version may have changed `workload.params`), on the CPU or the device given.
Results are kept in `.woolf/evals/<commit>-<data sha256>.json` (local, never
shared): a version's commit fixes its weights and config, so a result is
reused until the work area is deleted. A cache file that does not parse as a
result is ignored and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import time
from pathlib import Path

from woolf.errors import ConfigError, UsageError
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.safejson import loads_untrusted
from woolf.protocol.versions import Version
from woolf.storage.files import write_bytes_atomic
from woolf.workloads.features import BIND, features_of

MAX_BENCHMARK_BYTES = 256 * 1024 * 1024
MIN_BENCHMARK_BYTES = 256
_CACHE_MAX_BYTES = 64 * 1024


def read_benchmark_file(path: Path, min_bytes: int = MIN_BENCHMARK_BYTES) -> bytes:
    """A user's benchmark: a regular text file (UTF-8, no NUL) of a usable size, or a UsageError."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise UsageError(f"--benchmark {path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--benchmark {path}: not a regular file")
    if st.st_size > MAX_BENCHMARK_BYTES:
        raise UsageError(f"--benchmark {path}: {st.st_size} bytes, over the limit of {MAX_BENCHMARK_BYTES}",
                         hint="a benchmark is a held-out sample: take a part of the file")
    with open(path, "rb") as fh:
        data = fh.read(MAX_BENCHMARK_BYTES + 1)
    if len(data) > MAX_BENCHMARK_BYTES:  # it grew since the stat
        raise UsageError(f"--benchmark {path}: over the limit of {MAX_BENCHMARK_BYTES} bytes")
    if len(data) < min_bytes:
        raise UsageError(f"--benchmark {path}: {len(data)} bytes is too small to evaluate on "
                         f"(at least {min_bytes})", hint="use a larger sample of text")
    if b"\x00" in data:
        raise UsageError(f"--benchmark {path}: not a text file (a NUL byte at byte {data.index(bytes(1))})",
                         hint="a benchmark is UTF-8 text")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--benchmark {path}: not a text file (not UTF-8 at byte {exc.start})",
                         hint="a benchmark is UTF-8 text") from None
    return data


class Evaluator:
    def __init__(self, ledger, benchmark: Path | None = None, device: str = "cpu"):
        self.ledger, self.device = ledger, device
        if benchmark is None:
            self.data = ledger.benchmark()
            self.source = f"ledger benchmark ({ledger.config.benchmark.path})"
        else:
            wl = ledger.workload()
            context = getattr(wl, "context", 0)
            need = max(MIN_BENCHMARK_BYTES, 2 * (context + 1)) if isinstance(context, int) else MIN_BENCHMARK_BYTES
            self.data = read_benchmark_file(benchmark, need)
            self.source = str(benchmark)
        self.data_sha256 = hashlib.sha256(self.data).hexdigest()
        self.evaluations = 0  # computed, not read from the cache
        self.cache_hits = 0
        self.seconds = {"load": 0.0, "evaluate": 0.0}
        self._workloads: list[tuple] = []

    def _cache_path(self, version: Version) -> Path:
        return self.ledger.root / layout.WORK / "evals" / f"{version.commit}-{self.data_sha256}.json"

    def cached(self, version: Version) -> dict | None:
        try:
            record = loads_untrusted(self._cache_path(version).read_bytes(), _CACHE_MAX_BYTES, 4)
        except (OSError, ValueError):
            return None
        if not (isinstance(record, dict) and record.get("commit") == version.commit
                and record.get("data_sha256") == self.data_sha256 and isinstance(record.get("metrics"), dict)):
            return None
        m = record["metrics"]
        if not m or not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                            and math.isfinite(v) for k, v in m.items()):
            return None
        return m

    def _workload(self, version: Version):
        text = self.ledger.git.show_bytes(f"{version.commit}:{layout.CONFIG}")
        try:
            cfg = parse_config(text.decode(), f"{version.commit[:12]}:{layout.CONFIG}") if text else self.ledger.config
        except (ConfigError, UnicodeDecodeError):  # written by an older woolf: main's config is the best guess
            cfg = self.ledger.config
        if cfg == self.ledger.config:
            return self.ledger.workload()
        for known, wl in self._workloads:
            if known == cfg:
                return wl
        from woolf.workloads.base import load_workload  # deferred: loads torch

        wl = load_workload(cfg.workload)
        if BIND in features_of(wl):  # the model files as that version had them
            wl.bind(lambda rel: self.ledger.git.show_bytes(f"{version.commit}:{rel}"))
        self._workloads.append((cfg, wl))
        return wl

    def metrics(self, version: Version) -> dict:
        hit = self.cached(version)
        if hit is not None:
            self.cache_hits += 1
            return hit
        wl = self._workload(version)
        t0 = time.perf_counter()
        weights = self.ledger.load_weights(version)  # fetched and sha256-checked
        t1 = time.perf_counter()
        metrics = wl.evaluate(weights, self.data, self.device)
        t2 = time.perf_counter()
        self.seconds["load"] += t1 - t0
        self.seconds["evaluate"] += t2 - t1
        self.evaluations += 1
        record = {"version": version.version, "commit": version.commit, "data_sha256": self.data_sha256,
                  "metrics": metrics, "device": self.device, "seconds": round(t2 - t1, 4)}
        write_bytes_atomic(json.dumps(record, sort_keys=True).encode(), self._cache_path(version))
        return metrics

    def summary(self) -> dict:
        return {"benchmark": self.source, "data_sha256": self.data_sha256, "evaluations": self.evaluations,
                "cache_hits": self.cache_hits, "seconds": {k: round(v, 4) for k, v in self.seconds.items()}}
