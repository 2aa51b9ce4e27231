"""A validator-private benchmark (issue 13, item 7): only its sha256 and size are in the config."""

from __future__ import annotations

import hashlib

import pytest

from tests.crafting import craft_pr
from tests.validator.test_score import _trained
from woolf.audit.recompute import audit
from woolf.errors import StorageError
from woolf.forges.local import LocalForge
from woolf.ledger.benchmark import ENV, published_reason
from woolf.protocol.config import LedgerConfig
from woolf.protocol.trailers import parse_message
from woolf.validator import Validator
from woolf.workloads import corpus


def test_hidden_benchmark_gates_and_audit_says_what_it_cannot_check(make_net, tmp_path, monkeypatch):
    hidden = b"".join(corpus.read(f)[:2048] for f in corpus.pool_files()[-3:])[:4096]
    sha = hashlib.sha256(hidden).hexdigest()
    net = make_net(**{"policy.min_improvement": "-10", "benchmark.hidden_sha256": f'"{sha}"',
                      "benchmark.hidden_size": str(len(hidden))})
    val = net.clone("val")
    sub = craft_pr(val, tensors=_trained(val, "alice"), who="alice")
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(StorageError, match="hidden benchmark"):
        Validator(val, device="cpu").run()  # no copy: this validator cannot judge; no PR is rejected for it
    assert LocalForge.for_ledger(val).get(sub).state == "open"
    wrong = tmp_path / "wrong.txt"
    wrong.write_bytes(b"x" * len(hidden))
    monkeypatch.setenv(ENV, str(wrong))
    with pytest.raises(StorageError, match="do not match"):
        Validator(val, device="cpu").run()
    right = tmp_path / "hidden.txt"
    right.write_bytes(hidden)
    monkeypatch.setenv(ENV, str(right))
    [v] = Validator(val, device="cpu").run()
    assert v.accepted
    wl = val.workload()
    genesis = val.load_weights(val.show(0, ref="refs/remotes/origin/main"))
    assert v.metrics["before"]["loss"] == wl.evaluate(genesis, hidden)["loss"]
    assert v.metrics["before"]["loss"] != wl.evaluate(genesis, val.benchmark())["loss"]  # the public one stays
    _, fields = parse_message(val.git.message("refs/remotes/origin/main"))
    assert fields["Woolf-Benchmark"] == f"hidden:{sha}" and "Woolf-Metrics-After" in fields
    assert audit(val, reevaluate=True).ok  # with the copy, the metrics are re-evaluated
    monkeypatch.delenv(ENV)
    report = audit(val, reevaluate=True)
    assert report.ok and any("hidden benchmark" in n for n in report.notes)


@pytest.mark.unit
def test_a_rejection_publishes_the_hidden_loss_rounded():
    """Issue 25: every verdict published the hidden benchmark's loss at full float64 precision, one oracle
    query per PR. A rejection now carries it to 0.01; merged versions keep full precision (the gate's
    reference, the quorum's median and the audit compare them); the public benchmark is unchanged."""
    from woolf.ledger.benchmark import published
    from woolf.protocol.config import LedgerConfig
    from woolf.protocol.config_text import apply_overrides

    hidden = apply_overrides(LedgerConfig(), {"benchmark.hidden_sha256": f'"{"a" * 64}"', "benchmark.hidden_size": "10"})
    metrics = {"loss": 2.718281828459045, "tokens": 4096}
    assert published(hidden, metrics, accepted=False) == {"loss": 2.72, "tokens": 4096}
    assert published(hidden, metrics, accepted=True) == metrics
    assert published(LedgerConfig(), metrics, accepted=False) == metrics
    assert published(hidden, None, accepted=False) is None


def test_woolf_init_makes_the_hidden_benchmark_the_easy_path(tmp_path, cli):
    """Issue 25: `woolf init --hidden-benchmark FILE` pins it; without it, init says how."""
    from tests.conftest import key_for

    secret = tmp_path / "held-out.txt"
    secret.write_bytes(b"a held-out text only validators hold\n" * 20)
    proc = cli("init", str(tmp_path / "a"), "--storage", str(tmp_path / "s"), "--key", str(key_for("work")),
                   "--hidden-benchmark", str(secret), "--set", "workload.params.d_model=32",
                   "--set", "workload.params.n_layer=1", "--set", "workload.params.context=32", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    from woolf.ledger.ledger import Ledger

    cfg = Ledger.open(tmp_path / "a").config.benchmark
    assert cfg.hidden_sha256 == hashlib.sha256(secret.read_bytes()).hexdigest() and cfg.hidden_size == 740
    assert "the gate is the hidden benchmark" in proc.stdout
    plain = cli("init", str(tmp_path / "b"), "--storage", str(tmp_path / "s2"), "--key", str(key_for("work")),
                    "--set", "workload.params.d_model=32", "--set", "workload.params.n_layer=1", cwd=tmp_path)
    assert plain.returncode == 0 and "--hidden-benchmark FILE" in " ".join(plain.stdout.split())


@pytest.mark.unit
def test_a_rejection_on_a_hidden_benchmark_prints_its_numbers_to_two_decimals():
    cfg = LedgerConfig(name="x")
    reason = "loss 5.6974 -> 5.7387: improvement -0.0413 is below the required -0.0200"
    assert published_reason(cfg, reason) == reason  # the public benchmark: nothing to hide
    cfg.benchmark.hidden_sha256 = "ab" * 32
    assert published_reason(cfg, reason) == "loss 5.70 -> 5.74: improvement -0.04 is below the required -0.02"
    assert published_reason(cfg, "version 12 (PR x-1)") == "version 12 (PR x-1)"
