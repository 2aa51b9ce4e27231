"""Merge rules with state (woolf/core/merge_rules.py) and their state file: arithmetic and rejections."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save

from woolf.core.merge import apply_delta
from woolf.core.merge_rules import OuterState, Rule, carry_over, merge_step, zero_state
from woolf.core.scale import delta_scale, f32
from woolf.errors import ConfigError, IntegrityError
from woolf.protocol.config import LimitsConfig, MergeConfig, parse_config
from woolf.storage.outer_state import load_state, save_state, state_bytes
from woolf.storage.weights import spec_of

pytestmark = pytest.mark.unit


def _model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(5, 3, generator=g), "b": torch.randn(7, generator=g)}


def _delta(seed):
    g = torch.Generator().manual_seed(100 + seed)
    return {"a": 0.1 * torch.randn(5, 3, generator=g), "b": 0.1 * torch.randn(7, generator=g)}


def test_attenuated_is_exactly_the_seed_rule():
    cur, d = _model(), _delta(0)
    step = merge_step(Rule("attenuated", alpha=0.8), cur, None, d, attenuation=1 / 3)
    want = apply_delta(cur, d, delta_scale(0.8, 1 / 3))
    assert all(torch.equal(step.candidate[k], want[k]) for k in cur)
    assert step.state is None and step.applied and step.probe is step.candidate


def test_nesterov_matches_torch_sgd_nesterov():
    """Outer Nesterov on the delta as negative gradient is torch's SGD(nesterov=True)."""
    cur = _model()
    rule = Rule("nesterov", alpha=1.0, outer_lr=0.7, momentum=0.9)
    params = {k: torch.nn.Parameter(v.clone()) for k, v in cur.items()}
    opt = torch.optim.SGD(params.values(), lr=0.7, momentum=0.9, nesterov=True)
    state = None
    for i in range(4):
        d = _delta(i)
        step = merge_step(rule, cur, state, d, attenuation=1.0)
        cur, state = step.candidate, step.state
        for k, p in params.items():
            p.grad = -d[k]
        opt.step()
    for k in cur:
        assert torch.allclose(cur[k], params[k].detach(), atol=1e-6)


def test_delayed_nesterov_over_n_merges_is_one_nesterov_step_on_the_mean():
    cur = _model()
    rule = Rule("delayed_nesterov", outer_lr=0.5, momentum=0.9, buffer=3)
    deltas = [_delta(i) for i in range(3)]
    state = None
    w = cur
    for i, d in enumerate(deltas):
        step = merge_step(rule, w, state, d, attenuation=1.0)
        w, state = step.candidate, step.state
        assert state.count == (i + 1) % 3
    mean = {k: sum(d[k] for d in deltas) / 3 for k in cur}
    # from zero momentum: m = mean; total = lr*mean (the three 1/N parts) + lr*mu*m
    want = {k: cur[k] + 0.5 * mean[k] + 0.5 * 0.9 * mean[k] for k in cur}
    for k in cur:
        assert torch.allclose(w[k], want[k], atol=1e-6)
        assert torch.allclose(state.momentum[k], mean[k], atol=1e-6)
        assert not state.buffer[k].any()


def test_fedbuff_buffers_then_applies_the_mean():
    cur = _model()
    rule = Rule("fedbuff", outer_lr=1.0, momentum=0.0, buffer=2)
    d0, d1 = _delta(0), _delta(1)
    s1 = merge_step(rule, cur, None, d0, attenuation=0.5)
    assert not s1.applied and all(torch.equal(s1.candidate[k], cur[k]) for k in cur)
    # the gate judges the delta on its own while the weights do not change
    assert all(torch.allclose(s1.probe[k], cur[k] + 0.5 * d0[k]) for k in cur)
    s2 = merge_step(rule, s1.candidate, s1.state, d1, attenuation=1.0)
    assert s2.applied and s2.state.count == 0
    for k in cur:
        assert torch.allclose(s2.candidate[k], cur[k] + (0.5 * d0[k] + d1[k]) / 2, atol=1e-6)


def test_merges_are_bit_reproducible():
    rule = Rule("delayed_nesterov", buffer=2)
    runs = []
    for _ in range(2):
        cur, state = _model(), None
        for i in range(5):
            step = merge_step(rule, cur, state, _delta(i), attenuation=1 / (1 + i % 3))
            cur, state = step.candidate, step.state
        runs.append((save(cur), state_bytes(state)))
    same = [a == b for a, b in zip(runs[0], runs[1], strict=True)]
    assert same == [True, True]


def test_switching_away_from_fedbuff_applies_the_pending_buffer():
    cur = _model()
    fb = Rule("fedbuff", outer_lr=1.0, momentum=0.0, buffer=4)
    s = merge_step(fb, cur, None, _delta(0), attenuation=1.0)
    w, state = carry_over(Rule("delayed_nesterov"), s.state, s.candidate)
    assert all(torch.allclose(w[k], cur[k] + 0.7 * _delta(0)[k], atol=1e-6) for k in cur)
    assert state.rule == "delayed_nesterov" and state.count == 0
    # same rule: the state is kept as it is
    kept_w, kept = carry_over(fb, s.state, s.candidate)
    assert kept is s.state and kept_w is s.candidate


def test_f32_rounding():
    assert f32(0.1) != 0.1 and f32(f32(0.1)) == f32(0.1)


def test_rule_config_is_validated_and_backward_compatible():
    assert parse_config("name = 'x'\n").merge.rule == "attenuated"
    with pytest.raises(ConfigError, match="merge.rule"):
        parse_config("[merge]\nrule = 'adam'\n")
    with pytest.raises(ConfigError, match="merge.momentum"):
        parse_config("[merge]\nmomentum = 1.0\n")
    with pytest.raises(ConfigError, match="merge.buffer"):
        parse_config("[merge]\nbuffer = 0\n")
    with pytest.raises(ConfigError, match="policy.gate"):
        parse_config("[policy]\ngate = 'oracle'\n")
    rule = Rule.from_config(MergeConfig(rule="fedbuff", buffer=3))
    assert Rule.from_record("fedbuff", 1.0, rule.params()) == rule
    assert Rule.from_record(None, 0.5, None) == Rule("attenuated", alpha=0.5)


def test_state_file_round_trip_and_rejections(tmp_path):
    cur = _model()
    state = merge_step(Rule("fedbuff", buffer=3), cur, None, _delta(0), 1.0).state
    path = tmp_path / "outer.safetensors"
    save_state(state, path)
    back = load_state(path, spec_of(cur), LimitsConfig())
    assert back.rule == "fedbuff" and back.count == 1
    assert state_bytes(back) == path.read_bytes()
    # wrong shapes: another model
    other = {"a": torch.zeros(4, 3), "b": torch.zeros(7)}
    with pytest.raises(IntegrityError, match="does not fit the model"):
        load_state(path, spec_of(other), LimitsConfig())
    # not safetensors at all
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    with pytest.raises(IntegrityError):
        load_state(path, spec_of(cur), LimitsConfig())
    # an unknown rule or a bad count in the metadata
    z = zero_state(Rule("nesterov"), cur)
    path.write_bytes(save({f"momentum/{k}": v for k, v in z.momentum.items()},
                          metadata={"woolf": '{"count":0,"rule":"adam"}'}))
    with pytest.raises(IntegrityError, match="no known merge rule"):
        load_state(path, spec_of(cur), LimitsConfig())
    path.write_bytes(save({f"momentum/{k}": v for k, v in z.momentum.items()},
                          metadata={"woolf": '{"count":-1,"rule":"nesterov"}'}))
    with pytest.raises(IntegrityError, match="count"):
        load_state(path, spec_of(cur), LimitsConfig())
    # NaN momentum
    bad = OuterState("nesterov", 0, {k: torch.full_like(v, float("nan")) for k, v in z.momentum.items()})
    save_state(bad, path)
    with pytest.raises(IntegrityError, match="NaN"):
        load_state(path, spec_of(cur), LimitsConfig())
