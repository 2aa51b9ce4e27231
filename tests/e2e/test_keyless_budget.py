"""Issue 37, breach 4: slow delta URLs no longer stall the queue.

Keyless PRs whose delta URL trickles (a local HTTP server on 127.0.0.1, each answer bounded to 60 s)
each held the validator for forge.delta_timeout (300 s); a signed PR pushed after the pass began
waited for all of them. Now keyless downloads share one budget per pass (validator/intake.py), a
download the budget cuts is deferred to the next pass (not rejected), and a pass of keyless work
ends when a signed PR arrives: the signed PR is judged while every slow keyless PR is still open.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import time

import pytest
from safetensors.torch import save

from tests.crafting import craft_pr, random_delta
from woolf.forges.local import LocalForge
from woolf.validator import Validator, intake
from woolf.validator.intake import KeylessBudget, Pass


class Trickle:
    """Answers every GET with 64 bytes every 0.5 s, for at most ``most`` seconds."""

    def __init__(self, most: float = 60.0):
        self.most, self.hits = most, 0
        self.closed = threading.Event()  # set on exit: every answer still trickling ends at once

    def __enter__(self):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits += 1
                self.send_response(200)
                self.end_headers()
                end = time.monotonic() + outer.most
                try:
                    while time.monotonic() < end and not outer.closed.is_set():
                        self.wfile.write(b"\0" * 64)
                        self.wfile.flush()
                        outer.closed.wait(0.5)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_signed_pr_pushed_during_a_flood_of_slow_keyless_urls_is_judged_first(make_net, monkeypatch):
    # the product's 30 s budget and 10 s between looks for signed PRs, shortened: the same rules, 10x faster
    monkeypatch.setattr(intake, "KEYLESS_SECONDS", 3.0)
    monkeypatch.setattr(intake, "PREEMPT_EVERY", 1.0)
    net = make_net(**{"forge.delta_schemes": '["https", "http"]', "policy.min_improvement": "-10"})
    val, mal, alice = net.clone("val"), net.clone("mal"), net.clone("alice")
    with Trickle() as slow:
        keyless = []
        for i in range(4):
            data = save(random_delta(mal, scale=0.001, seed=i))
            d = {"kind": "dense", "sha256": hashlib.sha256(data).hexdigest(), "md5": hashlib.md5(data).hexdigest(),
                 "size": len(data), "url": f"{slow.url}/d{i}"}
            keyless.append(craft_pr(mal, raw=data, meta_patch={"delta": d}, who=f"slow{i}"))
        stop, seen = threading.Event(), {}
        validator = Validator(val, device="cpu")
        worker = threading.Thread(target=validator.watch, kwargs={"interval": 0.5, "stop": stop.is_set},
                                  daemon=True)
        worker.start()
        deadline = time.monotonic() + 120
        while not slow.hits and time.monotonic() < deadline:  # the pass has begun: a slow download is under way
            time.sleep(0.05)
        assert slow.hits, "the validator never started a keyless download"
        t0 = time.monotonic()
        signed = net.train_submit(alice, "alice")["id"]
        forge = LocalForge.for_ledger(alice)
        while time.monotonic() - t0 < 400:  # a bound for the old code's ~4 min, not a timing assertion
            states = {p.id: p.state for p in forge.list()}
            if states.get(signed) != "open":
                seen = states
                break
            time.sleep(0.25)
        waited = time.monotonic() - t0
        stop.set()
        print(f"signed PR judged {waited:.1f}s after its push; {slow.hits} slow downloads started; "
              f"keyless budget {intake.KEYLESS_SECONDS:g}s per pass")
    worker.join(120)
    assert seen.get(signed) == "merged", seen
    # main: the pass judged (and rejected) the slow keyless PRs first, one at a time
    assert all(seen.get(k) == "open" for k in keyless), seen


@pytest.mark.unit
def test_the_keyless_budget_defers_rather_than_rejects():
    from woolf.validator.intake import Deferred

    b = KeylessBudget(seconds=10.0, max_bytes=1000)
    assert b.deadline(300.0, 100) == 10.0
    b.spend(4.0, 100)
    assert b.deadline(300.0, 100) == 6.0 and b.deadline(2.0, 100) == 2.0
    with pytest.raises(Deferred, match="budget is spent"):
        b.deadline(300.0, 901)  # bytes: 100 + 901 > 1000
    b.spend(6.0, 0)
    with pytest.raises(Deferred):
        b.deadline(300.0, 1)
    assert "x" in Pass({"x"}).signed


def test_an_honest_keyless_pr_behind_slow_keyless_urls_gets_its_turn_over_passes(make_net, monkeypatch, capsys):
    """Starved keyless PRs: the download time each PR spent lived in one process's memory, so every new
    `woolf validate --all` started the slow PRs from zero: an honest keyless PR queued behind three slow
    keyless URLs stayed open pass after pass, and each pass printed "no open pull requests". Now the time
    spent is kept in the validator's work area (per PR id and delta sha256) and the keyless PR that has
    spent least goes first: each keyless PR gets its turn within a bounded number of passes."""
    from woolf.cli.main import main

    monkeypatch.setattr(intake, "KEYLESS_SECONDS", 1.0)  # the product's 30 s, shortened: the same rules
    net = make_net(**{"forge.delta_schemes": '["https", "http"]', "policy.min_improvement": "-10"})
    val, mal, dave = net.clone("val"), net.clone("mal"), net.clone("dave")
    with Trickle() as slow:
        for i in range(3):
            data = save(random_delta(mal, scale=0.001, seed=i))
            d = {"kind": "dense", "sha256": hashlib.sha256(data).hexdigest(), "md5": hashlib.md5(data).hexdigest(),
                 "size": len(data), "url": f"{slow.url}/d{i}"}
            craft_pr(mal, raw=data, meta_patch={"delta": d}, who=f"slow{i}")
        honest = net.train_submit(dave, "dave")["id"]  # keyless too, received after the slow ones
        forge, said = LocalForge.for_ledger(dave), []
        for _ in range(5):  # each pass a new `woolf validate --all`: nothing carried in memory
            assert main(["-C", str(val.root), "validate", "--all", "--device", "cpu"]) == 0
            said.append(capsys.readouterr().out.strip())
            if {p.id: p.state for p in forge.list()}.get(honest) != "open":
                break
    print(said)
    assert {p.id: p.state for p in forge.list()}.get(honest) == "merged", said  # before: open after every pass
    assert len(said) == 4 and honest in said[3], said  # three passes cut one slow download each, the fourth judges it
    assert said[0] == "4 open PRs deferred (keyless download budget)", said  # before: "no open pull requests"
