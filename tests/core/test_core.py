"""Core arithmetic and parsing: staleness functions, merge, policy, trailers, config."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save

from woolf.core.merge import apply_delta, compute_delta
from woolf.core.policy import decide
from woolf.core.scale import delta_scale
from woolf.core.staleness import attenuation
from woolf.errors import ConfigError
from woolf.protocol.config import LedgerConfig, PolicyConfig, StalenessConfig, parse_config
from woolf.protocol.config_text import apply_overrides, render_config
from woolf.protocol.trailers import format_message, parse_message

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("kind,s,expected", [
    ("inverse", 0, 1.0), ("inverse", 1, 0.5), ("inverse", 3, 0.25),
    ("polynomial", 3, 0.5), ("constant", 9, 1.0),
    ("hinge", 4, 1.0), ("hinge", 5, 1.0 / (0.5 * 1 + 1)),
])
def test_attenuation(kind, s, expected):
    assert attenuation(StalenessConfig(kind=kind, a=0.5, b=4), s) == pytest.approx(expected)


def test_attenuation_rejects_negative_staleness():
    with pytest.raises(ValueError):
        attenuation(StalenessConfig(), -1)


def test_merge_matches_formula_and_is_deterministic():
    g = torch.Generator().manual_seed(1)
    cur = {"a": torch.randn(257, 33, generator=g), "b": torch.randn(7, generator=g).half()}
    delta = {"a": torch.randn(257, 33, generator=g), "b": torch.randn(7, generator=g).half()}
    scale = delta_scale(1.0, 0.5)
    out = apply_delta(cur, delta, scale)
    assert torch.equal(out["a"], cur["a"] + delta["a"] * 0.5)
    assert out["b"].dtype == torch.float16
    assert save(out) == save(apply_delta(cur, delta, scale))  # same bytes every time


def test_delta_scale_is_float32_rounded():
    s = delta_scale(0.7, 1 / 3)
    assert s == torch.tensor(0.7 / 3, dtype=torch.float32).item()


def test_compute_delta_roundtrip():
    base = {"w": torch.randn(10, 10)}
    trained = {"w": base["w"] + 0.25}
    d = compute_delta(trained, base)
    assert torch.allclose(apply_delta(base, d, 1.0)["w"], trained["w"])
    with pytest.raises(ValueError):
        compute_delta({"x": torch.zeros(1)}, base)


def test_policy_tolerance_and_strict():
    tol = PolicyConfig(min_improvement=-0.05)
    assert decide(tol, {"loss": 2.0}, {"loss": 2.03}).accepted
    assert not decide(tol, {"loss": 2.0}, {"loss": 2.1}).accepted
    strict = PolicyConfig(min_improvement=0.01)
    assert not decide(strict, {"loss": 2.0}, {"loss": 1.995}).accepted
    assert decide(PolicyConfig(direction="maximize", metric="acc", min_improvement=0.0),
                  {"acc": 0.5}, {"acc": 0.6}).accepted
    nan = decide(tol, {"loss": 2.0}, {"loss": float("nan")})
    assert not nan.accepted and "not finite" in nan.reason
    assert not decide(tol, {"loss": 2.0}, {"acc": 1.0}).accepted


def test_trailers_roundtrip():
    msg = format_message("woolf: version 3", {"Woolf-Version": 3, "Woolf-Metrics": {"loss": 2.5},
                                              "Woolf-Reverts": None}, body="free text\nmore")
    subject, fields = parse_message(msg)
    assert subject == "woolf: version 3"
    assert fields == {"Woolf-Version": "3", "Woolf-Metrics": '{"loss":2.5}'}
    with pytest.raises(ValueError):
        format_message("x", {"Woolf-Reason": "two\nlines"})


def test_config_roundtrip_and_defaults():
    cfg = LedgerConfig(name="demo")
    assert parse_config(render_config(cfg)) == cfg
    assert cfg.merge.staleness.kind == "inverse"


@pytest.mark.parametrize("text,needle", [
    ("bogus = 1\n", "unknown section or key 'bogus'"),
    ("[merge]\nalpha = 1\n", "unknown key 'merge.alpha'"),
    ("[merge]\nalpha_base = -1\n", "'merge.alpha_base'"),
    ("[merge]\nalpha_base = 'x'\n", "must be a float"),
    ("[merge.staleness]\nkind = 'cubic'\n", "inverse, polynomial, hinge, constant"),
    ("[policy]\ndirection = 'up'\n", "'minimize' or 'maximize'"),
    ("[limits]\nmax_delta_bytes = 0\n", "limits.max_delta_bytes"),
    ("[merge\n", "not valid TOML"),
])
def test_config_errors_name_file_field_and_allowed(text, needle):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "ledger/woolf.toml")
    assert needle in str(err.value)
    assert "ledger/woolf.toml" in str(err.value)


def test_overrides():
    cfg = apply_overrides(LedgerConfig(), {"policy.min_improvement": "-0.5",
                                           "workload.params.d_model": "16",
                                           "merge.staleness.kind": "hinge"})
    assert cfg.policy.min_improvement == -0.5
    assert cfg.workload.params == {"d_model": 16}
    assert cfg.merge.staleness.kind == "hinge"


def test_shipped_example_config_parses():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "ledger" / "woolf.toml").read_text()
    assert parse_config(text) == LedgerConfig(name="example")
