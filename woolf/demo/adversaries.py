"""Participants that cheat, for `woolf demo --adversaries ...`: each tries what an attacker would.

Usage:
    python -m woolf.demo.worker adversary CLONE --name copycat --rounds 8 --steps 30

Kinds (the contributor id is the kind):
    free-rider   trains on random text (another shard, not the one it was given)
    copycat      resubmits another participant's open delta, scaled by 0.9 plus noise
    overfitter   trains on the public benchmark file in git
    noise        sends random deltas of plausible norm (the median of recent merged deltas)
    flooder      opens many small PRs (3 steps each) every round
    lazy         trains half the steps its recipe declares on its own shard, doubles the delta to look whole

The free-rider, the overfitter and the lazy one cheat against the proof of training as one who read its
code would (woolf/demo/forgery.py): each declares the recipe an honest participant would (its own shard,
the steps and seed), commits to a chain whose digests its own states match, seals it to its delta with
`woolf submit` and serves its states when challenged (`woolf prove`); the lazy one's chain is real up to
half its steps and made up after, the others' is the work on other data. A validator that audits them
(validators.retrain_rate, woolf/validator/audit_proof.py) finds a segment that does not replay. The copycat
and the noise declare no proof: `policy.require_retrain` refuses them, else they are unverifiable.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

import torch

from woolf.core.lora import expand
from woolf.core.scores import norm
from woolf.demo.kinds import KINDS
from woolf.errors import WoolfError
from woolf.forges.local import LocalForge
from woolf.ledger.ledger import Ledger
from woolf.ledger.recipes import global_step
from woolf.ledger.verdicts import merged_records
from woolf.protocol import layout
from woolf.workloads.base import TrainData
from woolf.workloads.features import GLOBAL_STEP, features_of

FLOOD = 6  # PRs per flooder round
ANSWER_FOR = 60.0  # seconds an adversary keeps answering challenges to its open PRs after its last round


def demo_settings(pretrained: bool) -> dict[str, str]:
    """The config a demo with adversaries runs with (a --set of the same key wins): a flood beyond four open
    PRs is rejected unread; a delta that removes under 0.01 nats from its own shard learned nothing (random
    deltas); continuing a pretrained model, one that helps random data as much as its own did not train on
    what it was given and is refused before the benchmark (uniqueness = reject: every honest delta of the
    quick demo beat random data, by 0.012-0.30 nats, the free-rider and overfitter by -0.009 to +0.026,
    benchmarks/RESULTS.md §7). From scratch honest deltas are often marked, so uniqueness only marks there.
    Every PR is re-trained from its recipe (validators.retrain_rate = 1; a quick demo's 15 steps re-train in
    well under a second): a delta not trained as declared is rejected (`retrain:`)."""
    out = {"queue.max_open_per_contributor": "4", "scoring.min_assigned": "0.01",
           "validators.retrain_rate": "1"}  # every PR re-trained from its recipe (validator/retrain.py)
    return {**out, "scoring.uniqueness": "reject"} if pretrained else out


def _event(**kw) -> None:
    print(json.dumps({"t": round(time.time(), 3), **kw}), flush=True)


def _submit(ledger, name: str, base, weights: dict, note: str, recipe: dict | None = None) -> str:
    from woolf.participant import SubmitOptions, submit  # deferred: loads numpy, yaml
    from woolf.storage.weights import save_atomic  # deferred: loads numpy

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.safetensors"
        save_atomic(weights, path, durable=False)
        options = SubmitOptions(weights=path, base_version=base.version, contributor=name,
                                message=note, recipe=recipe)
        return submit(ledger, options)["id"]


def _head(ledger):
    ledger.fetch()
    return ledger.head("refs/remotes/origin/main")


def _trained(ledger, wl, base, data, steps: int, seed: int) -> dict:
    torch.manual_seed(seed)
    new, _ = wl.train(ledger.load_weights(base), data, steps, seed=seed, **_global_step(ledger, wl, base))
    return new


def _global_step(ledger, wl, base) -> dict:
    return {"global_step": global_step(ledger, base)} if GLOBAL_STEP in features_of(wl) else {}


def _forged(ledger, wl, name: str, base, steps: int, seed: int, note: str, **how) -> str:
    """A cheat's run with a forged chain (demo/forgery.py), submitted as `woolf submit` sends any."""
    from woolf.demo.forgery import forge_run  # deferred: loads numpy, yaml
    from woolf.participant import SubmitOptions, submit  # deferred: loads numpy, yaml

    forge_run(ledger, wl, name, base, steps, seed, **how)
    return submit(ledger, SubmitOptions(contributor=name, message=note))["id"]


def _answer(ledger) -> None:
    """Serve the (forged) states a validator's challenge asks for, as `woolf prove` does."""
    from woolf.participant.prove import prove_once  # deferred: loads numpy, yaml

    try:
        prove_once(ledger)
    except WoolfError as exc:
        _event(kind="error", who="prove", error=exc.message)


def dense_of(delta: dict) -> dict:
    """A delta file's tensors as a dense update: a LoRA PR's factor pairs (`woolf demo --lora`)
    expanded as a validator expands them (core/lora.py), any other file as it is."""
    targets = sorted(k[:-len(".lora_A")] for k in delta if k.endswith(".lora_A"))
    if not targets:
        return delta
    return {t: expand(delta[f"{t}.lora_A"], delta[f"{t}.lora_B"], float(delta[f"{t}.lora_scale"].reshape(-1)[0]))
            for t in targets}


def _copy(ledger, name: str, rng: random.Random):
    """(base, weights) of base + 0.9 x another participant's open delta + noise; None when none is open."""
    from safetensors.torch import load_file  # deferred: safetensors

    prs = [p for p in LocalForge.for_ledger(ledger).list(state="open")
           if p.contributor not in KINDS and p.base_version is not None]
    if not prs:
        return None
    victim = prs[-1]
    _, ptr_rel, _ = layout.submission_paths(victim.id)
    delta = dense_of(load_file(ledger.store.fetch_object(ledger.pointer(victim.head, ptr_rel))))
    base = ledger.show(victim.base_version, ref="refs/remotes/origin/main")
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    w = ledger.load_weights(base)
    out = dict(w)  # a LoRA PR's delta names only its targets
    for k, d in delta.items():  # noise with a fifth of each tensor's own spread
        noise = torch.randn(d.shape, generator=g) * float(d.float().std() if d.numel() > 1 else 0) * 0.2
        out[k] = (w[k].float() + 0.9 * d.float() + noise).to(w[k].dtype)
    return base, out, victim.id


def _noise(ledger, base, rng: random.Random) -> dict:
    norms = sorted(r.delta_norm for r in merged_records(ledger, limit=8, ref="refs/remotes/origin/main")
                   if r.delta_norm)
    target = norms[len(norms) // 2] if norms else 1.0
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    w = ledger.load_weights(base)
    d = {k: torch.randn(v.shape, generator=g) for k, v in w.items()}
    scale = target / max(norm(d), 1e-12)
    return {k: (w[k].float() + d[k] * scale).to(w[k].dtype) for k in w}


def adversary(clone: Path, name: str, rounds: int, steps: int, seed: int, pause: float = 2.0) -> None:
    ledger = Ledger.open(clone)
    wl = ledger.workload()
    rng = random.Random(seed)
    for r in range(rounds):
        try:
            base = _head(ledger)
            if name == "free-rider":
                data = wl.default_data(f"~other:{name}:{r}", base.version)
                ids = [_forged(ledger, wl, name, base, steps, seed + r, "my shard", data=data)]
            elif name == "overfitter":
                data = TrainData([ledger.benchmark("refs/remotes/origin/main")], "benchmark")
                ids = [_forged(ledger, wl, name, base, steps, seed + r, "my shard", data=data)]
            elif name == "lazy":
                ids = [_forged(ledger, wl, name, base, steps, seed + r, "my shard", trained=0.5)]
            elif name == "noise":
                ids = [_submit(ledger, name, base, _noise(ledger, base, rng), "trained hard")]
            elif name == "flooder":
                data = wl.default_data(name, base.version)
                ids = [_submit(ledger, name, base, _trained(ledger, wl, base, data, 3, seed + 100 * r + i),
                               f"small {i}") for i in range(FLOOD)]
            elif name == "copycat":
                got = None
                for _ in range(20):  # wait for someone's open PR
                    got = _copy(ledger, name, rng)
                    if got:
                        break
                    time.sleep(0.5)
                if got is None:
                    continue
                base, weights, victim = got
                ids = [_submit(ledger, name, base, weights, "my own work")]
                _event(kind="copied", who=name, victim=victim)
            else:
                raise SystemExit(f"unknown adversary {name!r}")
            _event(kind="submitted", who=name, round=r, ids=ids)
        except WoolfError as exc:
            _event(kind="error", who=name, round=r, error=exc.message)
        for _ in range(max(1, round(pause / 0.5))):  # its PRs' challenges are answered meanwhile
            _answer(ledger)
            time.sleep(0.5)
    from woolf.participant.prove import open_runs  # deferred: loads numpy, yaml

    until = time.time() + ANSWER_FOR
    while time.time() < until and open_runs(ledger):  # and after its last round, while they are open
        _answer(ledger)
        time.sleep(0.5)
