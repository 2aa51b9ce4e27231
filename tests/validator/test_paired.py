"""The gate and scoring under `validators.eval = "sequential"` (validator/paired.py, seqscore.py, windows.py):
a clear regression is rejected on part of the benchmark and says so; an acceptance is the whole benchmark's,
as "full" measures it; main's windows are measured once per main, also across validator runs."""

from __future__ import annotations

import json
import random

import pytest

from tests.crafting import craft_pr, random_delta
from tests.validator.test_score import _trained
from woolf.errors import ConfigError
from woolf.ledger.benchmark import gate_benchmark
from woolf.protocol.config import LedgerConfig, parse_config
from woolf.protocol.config_text import render_config
from woolf.validator import Validator
from woolf.validator.seqscore import settle_scores
from woolf.validator.windows import kept


def _main(led):
    led.fetch()
    return led.head("refs/remotes/origin/main")


def _full_tokens(led) -> int:
    n, size = led.workload().windows(led.benchmark())
    return n * size


def test_a_clear_regression_is_rejected_on_part_of_the_benchmark_and_says_so(make_net):
    net = make_net(**{"scoring.enabled": "false", "validators.early_reject": "true"})
    val = net.clone("val")
    craft_pr(val, tensors=random_delta(val, scale=1.0), who="carol")
    [v] = Validator(val, device="cpu", name="v1").run()
    assert not v.accepted and 'validators.eval = "sequential"' in v.reason and "tokens" in v.reason
    before, after = v.metrics["before"], v.metrics["after"]
    assert before["tokens"] == after["tokens"] < _full_tokens(val)  # main's and the candidate's, the same windows
    assert after["loss"] > before["loss"] + 0.5


def test_by_default_a_rejection_is_measured_on_every_window(make_net):
    """Early rejection is off by default: an improvement carried by a few windows looks like a regression on
    most blocks (RESULTS.md §23)."""
    net = make_net(**{"scoring.enabled": "false"})
    val = net.clone("val")
    craft_pr(val, tensors=random_delta(val, scale=1.0), who="carol")
    [v] = Validator(val, device="cpu", name="v1").run()
    assert not v.accepted and "sequential" not in v.reason
    assert v.metrics["before"]["tokens"] == v.metrics["after"]["tokens"] == _full_tokens(val)


def test_the_same_regression_under_full_is_measured_on_every_window(make_net):
    net = make_net(**{"scoring.enabled": "false", "validators.eval": "full"})
    val = net.clone("val")
    craft_pr(val, tensors=random_delta(val, scale=1.0), who="carol")
    [v] = Validator(val, device="cpu", name="v1").run()
    assert not v.accepted and "sequential" not in v.reason
    assert v.metrics["before"]["tokens"] == v.metrics["after"]["tokens"] == _full_tokens(val)


def test_an_acceptance_is_the_whole_benchmarks_and_its_windows_become_the_next_mains(make_net):
    net = make_net(**{"policy.min_improvement": "-10"})
    val = net.clone("val")
    craft_pr(val, tensors=_trained(val, "carol"), who="carol")
    [v] = Validator(val, device="cpu", name="v1").run()
    assert v.accepted and v.version == 1
    assert v.metrics["after"]["tokens"] == v.metrics["before"]["tokens"] == _full_tokens(val)
    main = _main(val)
    wl = val.workload()
    want = wl.evaluate(val.load_weights(main), val.benchmark())  # what "full" records for the version
    assert v.metrics["after"]["loss"] == pytest.approx(want["loss"], rel=1e-6)
    assert main.metrics["loss"] == v.metrics["after"]["loss"] and main.metrics["tokens"] == _full_tokens(val)
    # a validator started afresh (another `woolf validate` run) finds main's windows kept on disk: the
    # candidate's, measured by the gate, adopted for the version it became
    again = Validator(val, device="cpu", name="v1")
    got = kept(again.ctx, main.commit, gate_benchmark(val))
    n, _ = wl.windows(val.benchmark())
    assert sorted(got) == list(range(n))
    assert sum(got.values()) / n == pytest.approx(v.metrics["after"]["loss"], rel=1e-12)


def test_a_kept_file_that_is_not_its_entry_is_measured_again(make_net):
    net = make_net(**{"policy.min_improvement": "-10", "scoring.enabled": "false"})
    val = net.clone("val")
    craft_pr(val, tensors=_trained(val, "carol"), who="carol")
    Validator(val, device="cpu", name="v1").run()
    main = _main(val)
    [path] = (val.root / ".woolf" / "validator" / "windows").glob(f"{main.commit}-*.json")
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "commit": "0" * 40}))  # another version's losses under this name
    assert kept(Validator(val, device="cpu", name="v1").ctx, main.commit, gate_benchmark(val)) == {}
    path.write_text("not json")
    assert kept(Validator(val, device="cpu", name="v1").ctx, main.commit, gate_benchmark(val)) == {}


@pytest.mark.parametrize("mode", ["sequential", "full"])
def test_scores_say_on_how_many_tokens_they_were_measured(make_net, mode):
    net = make_net(**{"policy.min_improvement": "-10", "scoring.uniqueness": "off", "validators.eval": mode})
    val = net.clone("val")
    craft_pr(val, tensors=_trained(val, "carol"), who="carol")
    [v] = Validator(val, device="cpu", name="v1").run()
    wl = val.workload()
    n, size = wl.windows(b"x" * val.config.scoring.sample_bytes)  # each shard's sample: sample_bytes of text
    if mode == "full":
        assert v.scores["tokens"] == 3 * n * size
    else:  # nothing to decide (no floor, no uniqueness check): the first block of each shard
        assert v.scores["tokens"] == 3 * (n // 8 + (n % 8 > 0)) * size
    assert {"assigned", "random", "randoms", "difference"} <= set(v.scores)


def test_a_floor_refusal_stops_at_the_assigned_shard(make_net):
    net = make_net(**{"policy.min_improvement": "-10", "scoring.min_assigned": "0.01"})
    val = net.clone("val")
    craft_pr(val, tensors=random_delta(val, scale=1e-3), who="carol")  # noise learned nothing
    [v] = Validator(val, device="cpu", name="v1").run()
    assert not v.accepted and v.reason.startswith("the delta removes")
    assert set(v.scores) == {"assigned", "tokens", "seed", "seconds"}


@pytest.mark.unit
@pytest.mark.parametrize(("key", "value"), [("eval", '"fast"'), ("confidence", "1.0"), ("confidence", "0.2")])
def test_the_evaluation_settings_are_checked(key, value):
    text = render_config(parse_config('name = "x"\n'))
    assert 'eval = "sequential"' in text and "confidence = 0.999" in text
    with pytest.raises(ConfigError, match=f"validators.{key}"):
        parse_config(text.replace("[validators]\n", f"[validators]\n{key} = {value}\n", 1)
                     .replace('eval = "sequential"\n', "" if key == "eval" else 'eval = "sequential"\n')
                     .replace("confidence = 0.999\n", "" if key == "confidence" else "confidence = 0.999\n"))


@pytest.mark.unit
def test_a_delta_that_changes_nothing_on_its_whole_shard_is_measured_whole():
    """Scoring's early stop never settles the effect stage's "changes nothing measurable" on a part of the
    assigned sample: here the mark is settled at the first block (random data got much worse), but the
    assigned shard's improvements average to exactly 0 over the whole sample, so it is measured whole."""
    rng = random.Random(5)
    half = [rng.gauss(0.0, 0.02) for _ in range(32)]
    assigned = half + [-x for x in half]  # mean 0 over the whole sample, not over a block of it
    cfg = LedgerConfig()
    assert cfg.scoring.uniqueness == "mark" and cfg.scoring.min_effect > 0

    def measure(j, idx):
        after = [-assigned[i] if j == 0 else 0.5 for i in idx]  # loss improvement: before - after
        return [0.0] * len(idx), after

    out = settle_scores(measure, [(64, 16)] * 3, "seed", cfg)
    assert out["tokens"] == 3 * 64 * 16 and abs(out["assigned"]) < cfg.scoring.min_effect  # every shard advances
