"""Racing validators and validators killed with SIGKILL: main stays linear and whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import git
from tests.crafting import craft_pr, craft_prs
from tests.validator.test_validator import _delta
from woolf.audit.recompute import audit
from woolf.forges.local import LocalForge
from woolf.protocol import layout


def _validator(ledger, env=None):
    return subprocess.Popen([sys.executable, "-m", "woolf", "validate", "--json", "--device", "cpu"],
                            cwd=ledger.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _check_invariants(net, n_prs):
    obs = net.clone(f"observer{time.monotonic_ns()}")
    obs.pull()
    versions = obs.log()
    assert [v.version for v in versions] == list(range(len(versions) - 1, -1, -1))
    merged_subs = [v.submission for v in versions if v.submission]
    assert len(merged_subs) == len(set(merged_subs)), "a PR was merged twice"
    first_parents = git("rev-list", "--first-parent", "main", cwd=net.hub).split()
    assert len(first_parents) == len(versions)
    prs = LocalForge.for_ledger(obs).list()
    assert len(prs) == n_prs
    for v in versions:  # every version's weights are in storage
        obs.store.verify_remote(obs.pointer(v.commit))
    report = audit(obs)
    assert report.ok, report.problems
    return versions, prs


def test_two_validators_race_on_five_prs(network):
    sub = network.clone("sub")
    ids = craft_prs(sub, [{"tensors": _delta(sub, seed=i)} for i in range(5)])
    v1, v2 = network.clone("v1"), network.clone("v2")
    procs = [_validator(v1), _validator(v2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    verdicts = [v for out, _ in outs for v in json.loads(out)]
    assert sorted(v["id"] for v in verdicts) == sorted(ids), "every PR gets exactly one verdict"
    versions, prs = _check_invariants(network, 5)
    assert len(versions) == 1 + sum(v["accepted"] for v in verdicts)
    assert all(p.state in ("merged", "rejected") for p in prs)


@pytest.mark.parametrize("point", ["after-upload", "before-push", "after-push"])
def test_validator_killed_mid_merge_then_rerun(network, point):
    sub = network.clone("sub")
    ids = craft_prs(sub, [{"tensors": _delta(sub, seed=i)} for i in range(2)])
    val = network.clone("val")
    main_before = git("rev-parse", "main", cwd=network.hub)
    p = _validator(val, env={"WOOLF_FAILPOINT": point})
    p.communicate(timeout=120)
    assert p.returncode == -signal.SIGKILL
    main_after_crash = git("rev-parse", "main", cwd=network.hub)
    assert (main_after_crash == main_before) == (point != "after-push")
    rerun = _validator(val)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    versions, prs = _check_invariants(network, 2)
    assert len(versions) == 3 and {p.state for p in prs} == {"merged"}
    assert {v.submission for v in versions if v.submission} == set(ids)


def test_validator_killed_at_random_times(network):
    sub = network.clone("sub")
    craft_prs(sub, [{"tensors": _delta(sub, seed=i)} for i in range(3)])
    val = network.clone("val")
    for delay in (1.0, 2.5, 4.0):
        p = _validator(val)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.communicate()
    final = _validator(val)
    _, err = final.communicate(timeout=120)
    assert final.returncode == 0, err
    _check_invariants(network, 3)
    assert not (val.root / layout.WEIGHTS).with_suffix(".tmp").exists()


def test_watch_validates_arriving_prs_and_stops_on_sigterm(network):
    import threading

    val = network.clone("val")
    watcher = subprocess.Popen([sys.executable, "-m", "woolf", "validate", "--watch", "--interval", "0.3",
                                "--device", "cpu"], cwd=val.root, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(watcher.stdout.readline, "")), daemon=True)
    reader.start()
    sub = network.clone("sub")
    sub_id = craft_pr(sub, tensors=_delta(sub, seed=3))
    deadline = time.time() + 120
    # wait for the verdict line itself: SIGTERM between the push and the print would lose only the line
    while time.time() < deadline and not any(sub_id in line for line in lines):
        time.sleep(0.3)
    watcher.send_signal(signal.SIGTERM)
    _, err = watcher.communicate(timeout=60)
    reader.join(timeout=10)
    out = "".join(lines)
    assert watcher.returncode == 0, err
    assert sub_id in out and "version 1" in out
    _check_invariants(network, 1)
