"""The drawdown bound (woolf/validator/drawdown.py): tolerated regressions do not add up: it holds against the
best version ever reached since the config last changed, not against a window that slides with them."""

from __future__ import annotations

from tests.crafting import craft_pr, random_delta
from woolf.participant import TrainOptions
from woolf.validator import Validator


def _validate(val) -> dict:
    return {v.id: v for v in Validator(val, device="cpu").run()}


def test_many_tolerated_regressions_stop_at_the_drawdown_bound(make_net):
    # window 1: the old reference (best of the last `window` versions) was main itself, so each
    # regression within the gate merged and the loss climbed without end
    from woolf.core.merge import compute_delta
    from woolf.participant import train
    from woolf.storage.weights import load_checked

    net = make_net(**{"policy.window": "1"})  # gate -0.02, max_drawdown -1 = 0.04
    val = net.clone("val")
    base = val.load_weights(val.head())
    train(val, TrainOptions(steps=20, contributor="x", seed=0, device="cpu"))
    trained = load_checked(val.root / ".woolf" / "work" / "trained.safetensors", val.config.limits)
    worse = compute_delta(base, trained)  # a step back from training: each PR regresses ~0.01, within the gate
    verdicts = []
    for i in range(8):
        noise = random_delta(val, scale=0.005, seed=100 + i)  # each PR its own: no copies of each other
        pr = craft_pr(val, tensors={k: 0.008 * worse[k] + noise[k] for k in worse}, who=f"noise{i % 4}")
        verdicts.append(_validate(val)[pr])
    losses = [v.metrics["loss"] for v in reversed(val.log(ref="refs/remotes/origin/main")) if v.metrics]
    print("losses along main:", [round(x, 4) for x in losses])
    print("reasons:", [v.reason for v in verdicts])
    worst = max(losses[i] - min(losses[: i + 1]) for i in range(len(losses)))
    assert worst <= 0.04 + 1e-9, f"the loss drifted {worst:.4f} above the best version reached"
    assert any("policy.max_drawdown" in v.reason for v in verdicts), [v.reason for v in verdicts]
    assert sum(v.accepted for v in verdicts) >= 2
