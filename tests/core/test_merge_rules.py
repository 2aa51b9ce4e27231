"""Merge rules with state, end to end: real validator, real DVC storage, audit from fresh clones."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import save

from tests.conftest import git
from tests.crafting import craft_pr, craft_prs
from woolf.audit.recompute import audit
from woolf.core.merge import apply_delta
from woolf.core.merge_rules import OuterState, Rule, carry_over, merge_step, zero_state
from woolf.core.scale import delta_scale, f32
from woolf.errors import ConfigError, IntegrityError
from woolf.protocol import layout
from woolf.protocol.config import LimitsConfig, MergeConfig, parse_config
from woolf.storage.outer_state import load_state, save_state, state_bytes
from woolf.storage.weights import spec_of
from woolf.validator import Validator


def _delta(led, scale=0.01, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = led.load_weights(led.head("refs/remotes/origin/main"))
    return {k: (torch.randn(v.shape, generator=g) * scale).to(v.dtype) for k, v in w.items()}


def _object(network, ptr):
    return network.root / "storage" / "files" / "md5" / ptr.md5[:2] / ptr.md5[2:]


def test_delayed_nesterov_versions_carry_state_and_audit_bit_exact(make_net):
    net = make_net(**{"merge.rule": "delayed_nesterov", "merge.buffer": "2", "merge.outer_lr": "0.5",
                      "policy.min_improvement": "-10"})
    val = net.clone("val")
    craft_prs(val, [{"tensors": _delta(val, seed=seed)} for seed in range(3)])
    verdicts = Validator(val, device="cpu").run()
    assert [v.accepted for v in verdicts] == [True, True, True]
    head = val.head()
    assert head.version == 3 and head.rule == "delayed_nesterov"
    assert head.rule_params == {"outer_lr": 0.5, "momentum": 0.9, "buffer": 2}
    path = val.state_path(head)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == head.state_sha256
    # the version commit changed nothing but ledger/weights/ pointers
    changed = set(val.git.changed_paths(val.show(2).commit, head.commit))
    assert changed <= layout.VERSION_PATHS and layout.STATE_POINTER in changed
    # a fresh clone recomputes every version's weights and outer state bit for bit
    report = audit(net.clone("auditor"))
    assert report.ok, report.problems


def test_fedbuff_buffers_without_changing_weights_then_applies(make_net):
    net = make_net(**{"merge.rule": "fedbuff", "merge.buffer": "2", "merge.outer_lr": "1.0",
                      "merge.momentum": "0.0", "policy.min_improvement": "-10"})
    val = net.clone("val")
    craft_pr(val, tensors=_delta(val, seed=1))
    [first] = Validator(val, device="cpu").run()
    v0, v1 = val.show(0), val.show(1)
    assert first.accepted and v1.weights_sha256 == v0.weights_sha256  # only buffered
    assert "probe" in first.metrics and first.metrics["after"] == first.metrics["before"]
    assert "buffered" in v1.subject
    craft_pr(val, tensors=_delta(val, seed=2))
    [second] = Validator(val, device="cpu").run()
    assert second.accepted and val.show(2).weights_sha256 != v0.weights_sha256
    assert audit(net.clone("auditor")).ok


def test_tampered_or_missing_outer_state_stops_merging_and_audit_names_it(make_net):
    net = make_net(**{"merge.rule": "nesterov", "policy.min_improvement": "-10"})
    val = net.clone("val")
    craft_pr(val, tensors=_delta(val, seed=1))
    Validator(val, device="cpu").run()
    v1 = val.head()
    ptr = val.pointer(v1.commit, layout.STATE_POINTER)
    obj = _object(net, ptr)
    original = obj.read_bytes()
    obj.chmod(0o644)
    obj.write_bytes(original[:-4] + b"\0\0\0\0")  # same size, other bytes
    report = audit(net.clone("auditor"))
    assert not report.ok
    assert any(p["version"] == 1 and p["problem"].startswith("outer state") for p in report.problems)
    # a fresh validator refuses to merge on top of it and pushes nothing
    val2 = net.clone("val2")
    sub = craft_pr(val2, tensors=_delta(val2, seed=2))
    with pytest.raises(IntegrityError, match="outer state of version 1"):
        Validator(val2, device="cpu").run(ids=[sub])
    assert git("rev-parse", "refs/heads/main", cwd=net.hub) == v1.commit
    # missing from storage: the same refusal, with the reason
    obj.unlink()
    with pytest.raises(Exception, match="outer state of version 1"):
        Validator(net.clone("val3"), device="cpu").run(ids=[sub])
    assert git("rev-parse", "refs/heads/main", cwd=net.hub) == v1.commit
    # restored: the PR merges and the audit is clean again
    obj.write_bytes(original)
    [v] = Validator(net.clone("val4"), device="cpu").run(ids=[sub])
    assert v.accepted and audit(net.clone("auditor2")).ok


def _regressing_direction(led, target: float):
    """A delta along a fixed random direction, scaled so one step raises the loss by ``target``."""
    from woolf.workloads.base import load_workload

    wl, bench = load_workload(led.config.workload), led.benchmark()
    w = led.load_weights(led.head("refs/remotes/origin/main"))
    g = torch.Generator().manual_seed(7)
    d = {k: torch.randn(v.shape, generator=g) for k, v in w.items()}
    base = wl.evaluate(w, bench)["loss"]
    lo, hi = 0.0, 1.0
    for _ in range(30):  # the loss rises along d; bisect the scale for one step of +target
        mid = (lo + hi) / 2
        loss = wl.evaluate({k: w[k] + mid * d[k] for k in w}, bench)["loss"]
        lo, hi = (mid, hi) if loss - base < target else (lo, mid)
    return {k: (lo * v).to(w[k].dtype) for k, v in d.items()}


@pytest.mark.parametrize("gate", ["current", "best"])
def test_best_version_gate_refuses_cumulative_regression(make_net, gate):
    """Steps that each regress within the tolerance: the current-version gate lets them pile up,
    the best-recent-version gate stops them once the total passes the tolerance."""
    # the gate alone: the drawdown bound and the copy check (same direction each time) would stop
    # these too, and are tested in tests/validator/test_score.py
    net = make_net(**{"policy.gate": gate, "policy.min_improvement": "-0.05", "policy.max_drawdown": "0",
                      "scoring.copy_window": "0"})
    val = net.clone("val")
    verdicts = []
    for i in range(3):  # each step raises the loss of the current version by about 0.03
        step = _regressing_direction(val, 0.03 + 0.001 * i)  # not byte-identical (no replay)
        craft_pr(val, tensors=step)
        verdicts += Validator(val, device="cpu").run()
    genesis = verdicts[0].metrics["before"]["loss"]
    if gate == "current":
        assert [v.accepted for v in verdicts] == [True, True, True], [v.reason for v in verdicts]
        assert verdicts[-1].metrics["after"]["loss"] > genesis + 0.05  # regressions accumulated
    else:
        assert [v.accepted for v in verdicts] == [True, False, False]
        assert "best recent version" in verdicts[1].reason
        assert val.head().metrics["loss"] <= genesis + 0.05
    assert audit(net.clone("auditor")).ok


def test_rule_switched_mid_history_applies_from_the_next_version_and_audits_clean(make_net):
    """attenuated -> fedbuff (one delta left in its buffer) -> delayed_nesterov: every version is
    recomputed under the rule it recorded; the pending FedBuff delta is applied, not lost."""
    from woolf.ledger.change import set_config

    net = make_net(**{"policy.min_improvement": "-10"})
    val = net.clone("val")
    craft_pr(val, tensors=_delta(val, seed=1))
    Validator(val, device="cpu").run()
    assert val.head().rule == "attenuated" and val.head().state_sha256 is None
    set_config(net.work, {"merge.rule": "fedbuff", "merge.buffer": "2", "merge.outer_lr": "1.0",
                          "merge.momentum": "0.0"}, reason="try FedBuff")
    d2 = _delta(val, seed=2)
    craft_pr(val, tensors=d2)
    [v] = Validator(val, device="cpu").run()
    head = val.head()
    assert v.accepted and head.rule == "fedbuff" and head.state_sha256  # buffered, weights unchanged
    assert head.weights_sha256 == val.show(head.version - 1).weights_sha256
    w_before = val.load_weights(val.head())
    set_config(net.work, {"merge.rule": "delayed_nesterov"}, reason="back to momentum")
    d3 = _delta(val, seed=3)
    craft_pr(val, tensors=d3)
    [v] = Validator(val, device="cpu").run()
    head = val.head()
    assert v.accepted and head.rule == "delayed_nesterov"
    # the buffered FedBuff delta reached the weights (lr 1.0), then delayed Nesterov's lr*g/N
    w = val.load_weights(head)
    for k in w:
        assert torch.allclose(w[k], w_before[k] + d2[k] + 0.5 * d3[k], atol=1e-6)
    report = audit(net.clone("auditor"))
    assert report.ok, report.problems
    rules = [x.rule for x in reversed(val.log())]
    assert rules.count("fedbuff") == 1 and rules[-1] == "delayed_nesterov"


# Merge rules with state (woolf/core/merge_rules.py) and their state file: arithmetic and rejections.


def _model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(5, 3, generator=g), "b": torch.randn(7, generator=g)}


def _rule_delta(seed):
    g = torch.Generator().manual_seed(100 + seed)
    return {"a": 0.1 * torch.randn(5, 3, generator=g), "b": 0.1 * torch.randn(7, generator=g)}


@pytest.mark.unit
def test_attenuated_is_exactly_the_seed_rule():
    cur, d = _model(), _rule_delta(0)
    step = merge_step(Rule("attenuated", alpha=0.8), cur, None, d, attenuation=1 / 3)
    want = apply_delta(cur, d, delta_scale(0.8, 1 / 3))
    assert all(torch.equal(step.candidate[k], want[k]) for k in cur)
    assert step.state is None and step.applied and step.probe is step.candidate


@pytest.mark.unit
def test_nesterov_matches_torch_sgd_nesterov():
    """Outer Nesterov on the delta as negative gradient is torch's SGD(nesterov=True)."""
    cur = _model()
    rule = Rule("nesterov", alpha=1.0, outer_lr=0.7, momentum=0.9)
    params = {k: torch.nn.Parameter(v.clone()) for k, v in cur.items()}
    opt = torch.optim.SGD(params.values(), lr=0.7, momentum=0.9, nesterov=True)
    state = None
    for i in range(4):
        d = _rule_delta(i)
        step = merge_step(rule, cur, state, d, attenuation=1.0)
        cur, state = step.candidate, step.state
        for k, p in params.items():
            p.grad = -d[k]
        opt.step()
    for k in cur:
        assert torch.allclose(cur[k], params[k].detach(), atol=1e-6)


@pytest.mark.unit
def test_delayed_nesterov_over_n_merges_is_one_nesterov_step_on_the_mean():
    cur = _model()
    rule = Rule("delayed_nesterov", outer_lr=0.5, momentum=0.9, buffer=3)
    deltas = [_rule_delta(i) for i in range(3)]
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


@pytest.mark.unit
def test_fedbuff_buffers_then_applies_the_mean():
    cur = _model()
    rule = Rule("fedbuff", outer_lr=1.0, momentum=0.0, buffer=2)
    d0, d1 = _rule_delta(0), _rule_delta(1)
    s1 = merge_step(rule, cur, None, d0, attenuation=0.5)
    assert not s1.applied and all(torch.equal(s1.candidate[k], cur[k]) for k in cur)
    # the gate judges the delta on its own while the weights do not change
    assert all(torch.allclose(s1.probe[k], cur[k] + 0.5 * d0[k]) for k in cur)
    s2 = merge_step(rule, s1.candidate, s1.state, d1, attenuation=1.0)
    assert s2.applied and s2.state.count == 0
    for k in cur:
        assert torch.allclose(s2.candidate[k], cur[k] + (0.5 * d0[k] + d1[k]) / 2, atol=1e-6)


@pytest.mark.unit
def test_merges_are_bit_reproducible():
    rule = Rule("delayed_nesterov", buffer=2)
    runs = []
    for _ in range(2):
        cur, state = _model(), None
        for i in range(5):
            step = merge_step(rule, cur, state, _rule_delta(i), attenuation=1 / (1 + i % 3))
            cur, state = step.candidate, step.state
        runs.append((save(cur), state_bytes(state)))
    same = [a == b for a, b in zip(runs[0], runs[1], strict=True)]
    assert same == [True, True]


@pytest.mark.unit
def test_switching_away_from_fedbuff_applies_the_pending_buffer():
    cur = _model()
    fb = Rule("fedbuff", outer_lr=1.0, momentum=0.0, buffer=4)
    s = merge_step(fb, cur, None, _rule_delta(0), attenuation=1.0)
    w, state = carry_over(Rule("delayed_nesterov"), s.state, s.candidate)
    assert all(torch.allclose(w[k], cur[k] + 0.7 * _rule_delta(0)[k], atol=1e-6) for k in cur)
    assert state.rule == "delayed_nesterov" and state.count == 0
    # same rule: the state is kept as it is
    kept_w, kept = carry_over(fb, s.state, s.candidate)
    assert kept is s.state and kept_w is s.candidate


@pytest.mark.unit
def test_f32_rounding():
    assert f32(0.1) != 0.1 and f32(f32(0.1)) == f32(0.1)


@pytest.mark.unit
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


@pytest.mark.unit
def test_state_file_round_trip_and_rejections(tmp_path):
    cur = _model()
    state = merge_step(Rule("fedbuff", buffer=3), cur, None, _rule_delta(0), 1.0).state
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
