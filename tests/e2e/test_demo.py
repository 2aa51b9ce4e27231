"""`woolf demo` end to end (small settings), its hub audited, its report in real headless Chromium."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import SMALL, git
from tests.demo.test_workers import _shadow
from woolf.audit.recompute import audit
from woolf.demo.hub import prepare_dir
from woolf.demo.run import DemoOptions, run_demo
from woolf.errors import UsageError
from woolf.ledger.ledger import Ledger

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "hub"
    # from random weights, so that learning is plainly visible (the default regime is tested below)
    result = run_demo(root, DemoOptions(participants=2, rounds=2, validators=2, steps=15, quick=True, regime="scratch-iid"))
    return root, result


def test_default_demo_continues_a_pretrained_genesis_each_participant_on_its_own_data(tmp_path, monkeypatch):
    """Started from a directory holding a `woolf/` folder (what `git clone ... woolf` leaves): the demo's
    worker processes are not shadowed by it (a run of its own did only that)."""
    from woolf.workloads.base import load_workload

    monkeypatch.setenv("WOOLF_CACHE", str(tmp_path / "cache"))
    _shadow(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    r = run_demo(tmp_path / "hub", DemoOptions(participants=2, rounds=1, validators=1, steps=5, quick=True,
                 settings=dict(SMALL), pretrain_steps=40))
    assert r.versions_merged + r.prs_rejected == 2, (tmp_path / "hub" / "logs" / "p1.log").read_text()
    assert r.regime == "continued-domain" and "its own data, continuing a pretrained model" in r.regime_words
    ledger = Ledger.open(tmp_path / "hub" / "clones" / "observer")
    wl = load_workload(ledger.config.workload)
    assert wl.domains == ["p1", "p2"]  # each participant its own part of the corpus
    assert set(wl.default_data("p1", 0).files).isdisjoint(wl.default_data("p2", 0).files)
    seeded = wl.evaluate(wl.genesis(0), wl.benchmark_bytes())["loss"]
    assert r.genesis_loss < seeded - 0.5  # genesis is the pretrained checkpoint, not random weights
    assert set(r.alone_losses) == {"p1", "p2"} and r.parallel_loss is not None and r.baseline_loss is not None
    summary = (tmp_path / "hub" / "report" / "summary.md").read_text()
    assert "Each participant trains on its own data, continuing a pretrained model" in summary
    assert "best participant alone" in summary and "synchronous data parallel" in summary


def test_demo_runs_end_to_end_and_hub_passes_audit(demo_run, tmp_path):
    root, r = demo_run
    assert not r.interrupted
    assert r.versions_merged >= 1
    assert r.versions_merged + r.prs_rejected == 4  # every PR got exactly one verdict
    assert r.final_loss < r.genesis_loss - 1.0  # learning is visible
    assert r.baseline_loss is not None and r.baseline_loss < r.genesis_loss
    # the reference lines at the same compute: each participant alone, data parallel, centralized
    assert set(r.alone_losses) == {"p1", "p2"}
    assert r.alone_loss == min(r.alone_losses.values()) < r.genesis_loss
    assert min(r.alone_losses.values()) <= r.alone_loss_mean <= max(r.alone_losses.values())
    assert r.parallel_loss is not None and r.parallel_loss < r.genesis_loss
    assert {"final_loss", "alone_loss", "alone_loss_mean", "parallel_loss", "baseline_loss"} <= set(r.to_json())
    assert r.network_seconds > 0 and r.reference_seconds > 0
    # what happened, in words: best and final version, merges that raised the loss, who did what
    assert r.final_version == r.versions_merged and r.best_loss <= r.final_loss
    assert 0 <= r.regressing_merges <= r.versions_merged
    assert set(r.activity) == {"p1", "p2"}
    assert sum(a["merged"] for a in r.activity.values()) == r.versions_merged
    assert sum(r.rejections.values()) == r.prs_rejected
    git("clone", "-q", str(root / "hub.git"), str(tmp_path / "mine"), cwd=tmp_path)
    mine = Ledger.open(tmp_path / "mine")
    assert mine.head().version == r.versions_merged
    assert audit(mine).ok


def test_demo_refuses_foreign_dir_and_bad_counts(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(UsageError, match="not an earlier demo hub"):
        prepare_dir(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    with pytest.raises(UsageError, match="at least one participant"):
        run_demo(tmp_path / "x", DemoOptions(participants=0))
    with pytest.raises(UsageError, match="at least one participant"):
        run_demo(tmp_path / "x", DemoOptions(validators=0))


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium(demo_run, tmp_path):
    root, _ = demo_run
    page = root / "report" / "index.html"
    assert page.exists() and (root / "report" / "summary.md").exists()
    base = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "CONSOLE" not in dom.stderr, dom.stderr  # no console errors or messages
    html = dom.stdout
    for table in ("summary", "versions", "prs", "leaderboard", "credit"):
        assert f'id="{table}"' in html or f"id='{table}'" in html
    assert "nan" not in html.split('id="versions"')[1]  # genesis shows its recorded loss
    assert "best participant alone" in html and "synchronous data parallel" in html
    assert "best version" in html and "Benchmark loss (nats/byte) of every merged version" in html  # words, captions
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 4  # loss, contributors, staleness, ratings over time
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    shot = tmp_path / "shot.png"
    subprocess.run([*base, "--window-size=1000,1200", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 20_000  # a page with plots, not a blank one


def test_ctrl_c_stops_children_and_leaves_a_usable_hub(tmp_path):
    import signal
    import sys
    import time

    hub = tmp_path / "hub"
    # many rounds, so that the network is surely still running when Ctrl-C comes; one participant and one
    # validator (two children to stop) of the tests' tiny model
    sets = [x for k, v in SMALL.items() if k != "workload.steps" for x in ("--set", f"{k}={v}")]
    proc = subprocess.Popen([sys.executable, "-m", "woolf", "demo", "--quick", "--steps", "15", "--rounds", "50",
                             "--participants", "1", "--validators", "1", *sets,
                             "--regime", "scratch-iid", "--dir", str(hub)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.time() + 120
    while time.time() < deadline:  # wait for the first submission, then interrupt mid-run
        log = hub / "logs" / "p1.log"
        if log.exists() and "submitted" in log.read_text():
            break
        time.sleep(0.3)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert "INTERRUPTED" in out, out
    assert proc.returncode == 130
    assert not _running_in(hub), "children still running"  # the workers and their zygote run in hub/logs
    git("clone", "-q", str(hub / "hub.git"), str(tmp_path / "mine"), cwd=tmp_path)
    assert audit(Ledger.open(tmp_path / "mine")).ok


def _running_in(where) -> list[int]:
    """The processes whose working directory is ``where`` or below it (a worker's is the demo's logs/)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd").startswith(str(where)):
                pids.append(int(entry))
        except OSError:
            continue
    return pids


@pytest.mark.unit
def test_summary_says_whether_joining_paid():
    from woolf.cli.demo.commands import comparison_lines
    from woolf.demo.result import DemoResult

    r = DemoResult("x", participants=3, validators=2, rounds=8, steps=30, total_steps=720, final_loss=2.48,
                   alone_loss=2.54, alone_loss_mean=2.57, parallel_loss=2.44, baseline_loss=2.16)
    text = "\n".join(comparison_lines(r))
    assert "2.5400 / 2.5700" in text and "2.4400" in text and "2.1600" in text
    assert "joining paid" in text and "60%" in text
    r.final_loss = 2.60
    assert "joining did not pay" in comparison_lines(r)[-1]
    r.alone_loss = None
    assert comparison_lines(r) == []


def test_demo_set_refuses_bad_settings(tmp_path):
    import sys

    proc = subprocess.run([sys.executable, "-m", "woolf", "demo", "--dir", str(tmp_path / "d"), "--set", "nokey"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "KEY=VALUE" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "woolf", "demo", "--dir", str(tmp_path / "d"),
                           "--set", "merge.rule=adam"], capture_output=True, text=True)
    assert proc.returncode != 0 and "merge.rule" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()  # checked before anything is built


def test_a_second_demo_into_the_same_dir_is_refused_without_force(tmp_path):
    import sys

    from woolf.demo.hub import MARKER

    root = tmp_path / "d"
    root.mkdir()
    (root / MARKER).write_text('{"created": 0}')
    (root / "clones" / "p1").mkdir(parents=True)
    with pytest.raises(UsageError, match="holds the demo hub made .*clones: p1") as e:
        prepare_dir(root)
    assert "--force" in e.value.hint and (root / "clones" / "p1").is_dir()
    proc = subprocess.run([sys.executable, "-m", "woolf", "demo", "--quick", "--dir", str(root)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 2 and "--force" in proc.stderr, proc.stderr
    assert (root / "clones" / "p1").is_dir()
    prepare_dir(root, replace=True)  # --force
    assert list(root.iterdir()) == []


def test_demo_checks_settings_and_adversaries_before_building_anything(tmp_path):
    import sys

    for bad, needle in ((["--set", "nokey=1"], "nokey"), (["--adversaries", "bogus"], "bogus")):
        proc = subprocess.run([sys.executable, "-m", "woolf", "demo", "--quick", "--dir", str(tmp_path / "d"), *bad],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode in (2, 3) and needle in proc.stderr, proc.stderr
        assert not (tmp_path / "d").exists()


@pytest.mark.unit
def test_an_unknown_adversary_is_refused_before_torch_loads(tmp_path):
    import sys

    probe = ("import runpy, sys\n"
             f"sys.argv = ['woolf', 'demo', '--quick', '--dir', {str(tmp_path / 'd')!r}, '--adversaries', 'copycat,bogus']\n"
             "try:\n    runpy.run_module('woolf', run_name='__main__')\n"
             "except SystemExit as e:\n    print(e.code, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
    assert "unknown adversaries ['bogus']" in proc.stderr and "choose from free-rider" in proc.stderr
    assert not (tmp_path / "d").exists()
