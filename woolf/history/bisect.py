"""Find the merge that made a model worse: on a benchmark, or by a user's own test (git bisect run).

Usage:
    r = bisect(ledger, benchmark=Path("other.txt"), good=0, bad=None, threshold=0.02)
    r["found"]["version"], r["found"]["contributor"], r["found"]["submission"], r["evaluations"]
    bisect(ledger, run="python my_test.py")   # the script gets WOOLF_WEIGHTS; exit 0 good, 1 bad

A version is bad when its metric on the benchmark is worse than the good
version's by more than ``threshold`` (in the direction of `policy.direction`;
a non-finite metric is bad), or when ``run`` exits 1..127 except 125. Exit 125,
a signal or a timeout stops the bisection (no skipping). The good version is
evaluated first and must be good; the bad one is evaluated only if the search
ends on it, so 1,000 versions take at most 11 evaluations (woolf/core/bisect.py).
Evaluations are cached (woolf/history/evaluate.py); nothing in the ledger changes.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from pathlib import Path

from woolf.core.bisect import first_bad, max_probes
from woolf.errors import UsageError, WoolfError
from woolf.history.diff import version_entry
from woolf.history.evaluate import Evaluator
from woolf.protocol import layout


class BisectError(WoolfError):
    """The user's script could not say good or bad (exit 125, a signal, a timeout)."""

    exit_code = 1


def _worse(value, reference: float, threshold: float, direction: str) -> bool:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return True
    return value > reference + threshold if direction == "minimize" else value < reference - threshold


def _run_script(ledger, command: str, version, timeout: float) -> bool:
    weights = ledger.checkout(version.version, ledger.root / layout.WORK / "bisect" / "weights.safetensors")
    env = {**os.environ, "WOOLF_WEIGHTS": str(weights), "WOOLF_VERSION": str(version.version),
           "WOOLF_COMMIT": version.commit}
    try:
        # the user's own command line, typed by them (as `git bisect run`), never from the ledger
        proc = subprocess.run(command, shell=True, cwd=ledger.root, env=env, timeout=timeout)  # noqa: S602
    except subprocess.TimeoutExpired:
        raise BisectError(f"--run timed out after {timeout:g}s on version {version.version}") from None
    code = proc.returncode
    if code == 0:
        return False
    if 1 <= code <= 127 and code != 125:
        return True
    raise BisectError(f"--run exited {code} on version {version.version}: neither good (0) nor bad (1..127)",
                      hint="exit 125 (skip) is not supported: make the script decide good or bad")


def bisect(ledger, benchmark: Path | None = None, good: int | None = None, bad: int | None = None,
           threshold: float = 0.02, run: str | None = None, device: str = "cpu",
           run_timeout: float = 3600.0, progress=None) -> dict:
    head = ledger.head()
    good = 0 if good is None else good
    bad = head.version if bad is None else bad
    v_good, _ = ledger.show(good), ledger.show(bad)  # UnknownVersionError first
    if not good < bad:
        raise UsageError(f"--good {good} is not older than --bad {bad}",
                         hint="the good version comes before the bad one in the ledger's history")
    if run is not None and benchmark is not None:
        raise UsageError("--run and --benchmark exclude each other")
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold >= 0):
        raise UsageError(f"--threshold {threshold}: must be a finite number >= 0")
    policy = ledger.config.policy
    t0 = time.perf_counter()
    probes: list[dict] = []
    evaluator = None
    if run is not None:
        script_seconds = [0.0]

        def is_bad(n: int) -> bool:
            ts = time.perf_counter()
            verdict = _run_script(ledger, run, ledger.show(n), run_timeout)
            script_seconds[0] += time.perf_counter() - ts
            probes.append({"version": n, "bad": verdict})
            if progress:
                progress(n, None, verdict)
            return verdict

        if is_bad(good):
            raise UsageError(f"the good version {good} is already bad (--run exits non-zero on it)",
                             hint="pick an older --good, or check the script")
        reference = None
    else:
        evaluator = Evaluator(ledger, benchmark, device)
        reference = evaluator.metrics(v_good).get(policy.metric)
        if not isinstance(reference, (int, float)) or not math.isfinite(reference):
            raise UsageError(f"the good version {good} is already bad: its {policy.metric} is {reference}",
                             hint="pick an older --good")
        probes.append({"version": good, policy.metric: reference, "bad": False})

        def is_bad(n: int) -> bool:
            value = evaluator.metrics(ledger.show(n)).get(policy.metric)
            verdict = _worse(value, reference, threshold, policy.direction)
            probes.append({"version": n, policy.metric: value, "bad": verdict})
            if progress:
                progress(n, value, verdict)
            return verdict

    found, _ = first_bad(good, bad, is_bad)
    result = {"good": good, "bad": bad, "threshold": threshold, "metric": policy.metric,
              "direction": policy.direction, "reference": reference, "probes": probes,
              "queries": len(probes), "evaluations": len(probes), "max_evaluations": 1 + max_probes(good, bad),
              "found": None, "seconds": round(time.perf_counter() - t0, 4)}
    if evaluator is not None:
        result.update(evaluator.summary())
        result["evaluations"] = evaluator.evaluations
    else:
        result["seconds_run"] = round(script_seconds[0], 4)
    if found is not None:
        by_version = {p["version"]: p for p in probes}
        result["found"] = {**version_entry(ledger.show(found)), "value": by_version[found].get(policy.metric),
                           "previous": by_version[found - 1].get(policy.metric)}
    return result
