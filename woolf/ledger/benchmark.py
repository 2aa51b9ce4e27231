"""A validator-private benchmark: the config pins only its sha256 and size; participants never see it.

Usage:
    bench = gate_benchmark(ledger)     # the hidden benchmark when configured, else the public one in git
    note = hidden_note(ledger.config)  # what an audit without it can and cannot check (None: not hidden)
    shown = published(cfg, metrics, accepted)  # what a verdict or vote publishes of the hidden metrics

A validator points WOOLF_HIDDEN_BENCHMARK at its private copy (on GitHub: a step
fetches it from a secret-protected location into a file). The file is read only
if it is a regular file of exactly `benchmark.hidden_size` bytes whose sha256 is
`benchmark.hidden_sha256`. Without it a validator refuses to judge (a
StorageError: the validator's own problem, never a PR's rejection). The public
benchmark in git stays, for participants' own checks.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from woolf.errors import StorageError

ENV = "WOOLF_HIDDEN_BENCHMARK"


def hidden_benchmark(cfg) -> bytes:
    b = cfg.benchmark
    path = os.environ.get(ENV)
    if not path:
        raise StorageError(f"this ledger's gate uses a hidden benchmark (sha256 {b.hidden_sha256[:16]}...) and "
                           f"{ENV} is not set",
                           hint=f"point {ENV} at the validators' private copy (the maintainers hand it out)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise StorageError(f"{ENV}={path}: cannot open ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != b.hidden_size:
            raise StorageError(f"{ENV}={path}: not a regular file of {b.hidden_size} bytes "
                               f"(benchmark.hidden_size)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(b.hidden_size + 1)
    finally:
        os.close(fd)
    if len(data) != b.hidden_size or hashlib.sha256(data).hexdigest() != b.hidden_sha256:
        raise StorageError(f"{ENV}={path}: its bytes do not match benchmark.hidden_sha256",
                           hint="fetch the hidden benchmark again from the validators' private location")
    return data


def gate_benchmark(ledger) -> bytes:
    cfg = ledger.config
    return hidden_benchmark(cfg) if cfg.benchmark.hidden_sha256 else ledger.benchmark()


def benchmark_label(cfg) -> str | None:
    """The Woolf-Benchmark trailer: which benchmark the recorded metrics are on (None: the public one)."""
    return f"hidden:{cfg.benchmark.hidden_sha256}" if cfg.benchmark.hidden_sha256 else None


def hidden_note(cfg) -> str | None:
    if not cfg.benchmark.hidden_sha256:
        return None
    return ("the gate's metrics come from a hidden benchmark (sha256 "
            f"{cfg.benchmark.hidden_sha256[:16]}..., {cfg.benchmark.hidden_size} bytes): the audit checks "
            "every merge, signature, decision and score trailer it can, but re-evaluates the recorded metrics "
            f"only with {ENV} set to a copy")


HIDDEN_DIGITS = 2  # a rejection publishes the hidden benchmark's metrics to 0.01: no fine-grained oracle


def published(cfg, metrics: dict | None, accepted: bool) -> dict | None:
    """The metrics a verdict or vote carries. On a hidden benchmark a rejected PR's are rounded to
    HIDDEN_DIGITS decimals: each PR would otherwise be one full-precision query of the private set (the
    decision and the coarse loss are all a participant needs). Merged versions keep full precision:
    the gate's reference, the quorum's median and the audit's re-evaluation compare them."""
    if not cfg.benchmark.hidden_sha256 or accepted or not isinstance(metrics, dict):
        return metrics
    return {k: round(x, HIDDEN_DIGITS) if isinstance(x, float) else x for k, x in metrics.items()}


_FINE = re.compile(r"([-+]?)(\d+\.\d{3,})")


def published_reason(cfg, reason: str) -> str:
    """A rejection's reason as its verdict carries it: on a hidden benchmark every number with more than
    HIDDEN_DIGITS decimals rounded to HIDDEN_DIGITS, like its metrics (`Woolf-Reason` printed
    the hidden loss to 4 decimals, a fine-grained oracle the rounded metrics were meant to deny)."""
    if not cfg.benchmark.hidden_sha256 or not reason:
        return reason
    return _FINE.sub(lambda m: f"{m.group(1)}{float(m.group(2)):.{HIDDEN_DIGITS}f}", reason)


def hidden_settings(path) -> dict[str, str]:
    """The config overrides that make ``path`` (read once, here) the hidden gate: `woolf init --hidden-benchmark`."""
    data = Path(path).read_bytes()
    if not data:
        raise StorageError(f"{path}: an empty file is no benchmark")
    return {"benchmark.hidden_sha256": f'"{hashlib.sha256(data).hexdigest()}"', "benchmark.hidden_size": str(len(data))}
