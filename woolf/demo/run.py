"""`woolf demo`: a decentralized training network as real processes on this machine.

Usage:
    result = run_demo(Path("woolf-demo"), DemoOptions(participants=3, rounds=8, console=Console()))
    result = run_demo(Path("woolf-demo"), DemoOptions(quick=True, adversaries=["copycat"]))
    result = run_demo(Path("woolf-demo"), DemoOptions(quick=True, lora="4"))  # LoRA PRs of rank 4 (demo/lora.py)
    result.final_loss < result.genesis_loss

run_demo takes one DemoOptions (None: its defaults).

Participants loop pull -> train -> submit at different speeds (so PRs go
stale); validators validate continuously; the hub is a bare git repository and
a storage directory, left on disk for every other command to use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from woolf.demo.adversaries import demo_settings
from woolf.demo.hub import create_hub
from woolf.demo.kinds import parse_kinds
from woolf.demo.live import LiveView, snapshot
from woolf.demo.lora import contribution_words, demo_lora, lora_facts, lora_settings
from woolf.demo.references import margin_noise, reference_losses, window_losses
from woolf.demo.regimes import DEFAULT as DEFAULT_REGIME
from woolf.demo.regimes import REGIMES, prepare_regime
from woolf.demo.result import DemoResult, judge_validators, outcomes
from woolf.demo.workers import check_alive, stop, wait_for
from woolf.demo.zygote import Zygote
from woolf.errors import UsageError
from woolf.interrupts import interruptible
from woolf.ledger.benchmark import ENV as HIDDEN_ENV
from woolf.ledger.benchmark import gate_benchmark
from woolf.ledger.ledger import Ledger
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides
from woolf.protocol.lora_spec import LORA_PARAM, parse_lora
from woolf.report.story import activity, rejection_kinds, version_facts
from woolf.workloads import corpus
from woolf.workloads.base import load_workload
from woolf.workloads.features import LORA, features_of


def _hidden_benchmark(settings: dict) -> tuple[dict, bytes | None]:
    """With adversaries: the gate judges by held-out text only validators read (the overfitter trains on
    the public file in git). Written beside the hub, its path given to validators (and to this process)."""
    if "benchmark.hidden_sha256" in settings:
        return {}, None

    size = int(settings.get("workload.params.benchmark_bytes", 32768))
    text = corpus.benchmark_text(2 * size)[size:]  # the same held-out files, past the public part
    return {"benchmark.hidden_sha256": f'"{hashlib.sha256(text).hexdigest()}"',
            "benchmark.hidden_size": str(len(text))}, text


@dataclass(frozen=True)
class DemoOptions:
    """The network to run; each field is the keyword `run_demo` takes, with the same default."""

    participants: int = 3  # honest participant processes
    rounds: int = 8  # contributions per participant
    validators: int = 2  # validator processes
    steps: int | None = None  # training steps per contribution; None: 15 with quick, else 30
    quick: bool = False  # shorter pauses and fewer steps
    console: Console | None = None  # where progress and the live view go; None: a new Console
    report: bool = True  # write report/ (HTML, plots, markdown) at the end
    settings: dict[str, str] | None = None  # config keys of the demo ledger, as `woolf init --set`
    quorum: int = 1  # validators.quorum: agreeing votes a PR needs to settle
    dishonest: bool = False  # the last validator votes accept on everything (demo/dishonest.py)
    adversaries: list[str] | None = None  # kinds of cheating participants (demo/adversaries.py)
    replace: bool = False  # replace an earlier demo hub at root (else: UsageError); `woolf demo --force`
    regime: str = DEFAULT_REGIME  # where genesis comes from and whose data is whose (demo/regimes.py)
    pretrain_steps: int | None = None  # continued regimes: central steps of the pretrained genesis (None: its default)
    # seconds a participant waits for its PR's verdict before its next round (0: none). A real contribution
    # trains for minutes and waits seconds for its verdict; here training takes 1-3 s and a verdict 2-10 s on
    # a loaded machine, and without waiting PRs merged at staleness 4-6 (benchmarks/RESULTS.md §4)
    wait_verdict: float = 30.0
    lora: str | None = None  # participants contribute LoRA adapters: a rank ("4") or a spec (demo/lora.py)


def plural(count: int, noun: str) -> str:
    """"1 validator", "2 validators"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def run_demo(root: Path, options: DemoOptions | None = None) -> DemoResult:
    """Build the hub at ``root``, run the network until every participant is done, then the
    reference runs and the report, as ``options`` (a DemoOptions) says."""
    o = options if options is not None else DemoOptions()
    participants, rounds, validators, quorum = o.participants, o.rounds, o.validators, o.quorum
    dishonest, quick = o.dishonest, o.quick
    if participants < 1 or validators < 1 or rounds < 1:
        raise UsageError("a demo needs at least one participant, one validator and one round")
    if quorum < 1 or quorum > validators - dishonest:
        raise UsageError(f"a quorum of {quorum} needs at least {plural(quorum, 'honest validator')} "
                         f"({plural(validators, 'validator')}{', one of them dishonest' if dishonest else ''})",
                         hint="raise --validators or lower --quorum")
    settings = {**(o.settings or {}), **({"validators.quorum": str(quorum)} if quorum > 1 else {})}
    lora = demo_lora(o.lora)
    settings = {**lora_settings(lora, settings), **settings}

    adversaries = parse_kinds(",".join(o.adversaries or []))
    hidden = None
    if adversaries:  # floods, random deltas and (continuing a pretrained model) free riders: demo_settings
        pinned, hidden = _hidden_benchmark(settings or {})
        pretrained = o.regime in REGIMES and REGIMES[o.regime].pretrained  # a bad --regime fails below
        settings = {**demo_settings(pretrained), **pinned, **(settings or {})}
    console = o.console or Console()
    steps = o.steps or (15 if quick else 30)
    names = [f"p{i + 1}" for i in range(participants)]
    vnames = [f"v{i + 1}" for i in range(validators)]
    t0 = time.time()
    root = Path(root).resolve()
    overrides = {"workload.steps": str(steps), **(settings or {})}
    built: list[float] = []  # set when the pretrained genesis is built, not read from the cache

    def building(line: str) -> None:
        built.append(time.time())
        console.print(f"[dim]{line}[/]")

    targets = _check_lora(lora, overrides)
    weights, added = prepare_regime(o.regime, names, overrides, o.pretrain_steps, progress=building)
    genesis_build = round(time.time() - built[0], 1) if built else None
    hub = create_hub(root, names + adversaries, vnames, overrides={**added, **overrides}, replace=o.replace,
                     weights=weights)
    result = DemoResult(str(root), participants, validators, rounds, steps, regime=o.regime,
                        genesis_build_seconds=genesis_build,
                        regime_words=REGIMES[o.regime].words,
                        total_steps=participants * rounds * steps, quorum=quorum, adversaries=adversaries,
                        lora=lora, contributions=contribution_words(lora, targets))
    if hidden is not None:  # validators (spawned below) and the reference runs read it; participants never do
        private = root / "validators-only" / "benchmark.txt"
        private.parent.mkdir()
        private.write_bytes(hidden)
        os.environ[HIDDEN_ENV] = str(private)
    observer = Ledger.open(hub.clone_of("observer"))

    wl = load_workload(observer.config.workload)
    genesis = observer.load_weights(observer.head())
    result.genesis_loss = wl.evaluate(genesis, gate_benchmark(observer))["loss"]
    result.dense_bytes = sum(4 * t.numel() for t in genesis.values() if t.is_floating_point())
    console.print(f"hub at {root}: {plural(participants, 'participant')} x {plural(rounds, 'round')} x "
                  f"{plural(steps, 'step')}, {plural(validators, 'validator')}; {result.regime_words} "
                  f"(--regime {o.regime}); contributions: {result.contributions}")
    stop_file = root / ".stop"
    t_net = time.time()
    result.setup_seconds = round(t_net - t0, 1)
    liar = vnames[-1] if dishonest else None
    zygote = Zygote(root / "logs")  # the workers are forked from it: torch is imported once
    spawn = zygote.spawn
    procs = [spawn(["validator", str(hub.clone_of(v)), "--name", v, "--stop-file", str(stop_file),
                     *(["--dishonest"] if v == liar else [])], root / "logs" / f"{v}.log") for v in vnames]
    # different speeds: later participants sleep longer between training and submitting
    parts = [spawn(["participant", str(hub.clone_of(n)), "--name", n, "--rounds", str(rounds),
                     "--steps", str(steps), "--delay", f"{i * (0.5 if quick else 1.5):.2f}",
                     "--seed", str(i), "--wait-verdict", str(o.wait_verdict)], root / "logs" / f"{n}.log")
             for i, n in enumerate(names)]
    parts += [spawn(["adversary", str(hub.clone_of(a)), "--name", a, "--rounds", str(rounds), "--steps", str(steps),
                      "--seed", str(100 + i), "--delay", "1.0" if quick else "2.0"], root / "logs" / f"{a}.log")
              for i, a in enumerate(adversaries)]
    workers = dict(zip([*vnames, *names, *adversaries], procs + parts, strict=True))
    try:  # Ctrl-C or SIGTERM stop the network cleanly (see woolf/interrupts.py); a dead worker ends it loudly
        with interruptible(), LiveView(console) as live:
            wait_for(parts, lambda: live.show(snapshot(observer), time.time() - t0, result.genesis_loss, "woolf demo"),
                     check=lambda: check_alive(workers, root / "logs"))
            check_alive(workers, root / "logs")
            stop_file.touch()
            wait_for(procs, lambda: live.show(snapshot(observer), time.time() - t0, result.genesis_loss, "draining"))
            check_alive(workers, root / "logs")
            live.show(snapshot(observer), time.time() - t0, result.genesis_loss, "done")
    except KeyboardInterrupt:
        result.interrupted = True
        console.print("[yellow]interrupted: stopping participants and validators[/]")
    finally:
        stop(parts + procs)
        zygote.close()
    result.network_seconds = round(time.time() - t_net, 1)
    snap = snapshot(observer)
    result.versions_merged = len(snap.versions) - 1
    rejected = [p for p in snap.prs if p.state == "rejected"]
    result.prs_rejected = len(rejected)
    result.rejections = rejection_kinds(snap.prs)
    result.activity = activity(snap.prs)
    kinds = lora_facts(snap.prs)
    result.merged_kinds, result.lora_bytes = kinds["merged_kinds"], kinds["lora_bytes"]
    result.final_loss = snap.loss if snap.loss is not None else result.genesis_loss
    facts = version_facts(snap.versions)
    result.final_version, result.best_version = facts["final_version"], facts["best_version"]
    result.best_loss, result.regressing_merges = facts["best_loss"], facts["regressing_merges"]
    if quorum > 1 or dishonest:
        judge_validators(observer, result, liar)
    outcomes(observer, result, adversaries)
    console.print()
    if not result.interrupted:
        console.print(f"reference runs at the same compute: each participant alone{' with LoRA' if lora else ''} "
                      f"({rounds} x {steps} "
                      f"steps), synchronous data parallel, centralized ({result.total_steps} steps) ...")
        t_ref = time.time()
        try:
            with interruptible():
                refs = reference_losses(observer, names, rounds, steps, progress=lambda key, i, n: console.print(
                    f"  {i}/{n} done: {key.rstrip(':')}"))
            result.alone_losses, result.alone_loss = refs.alone_losses, refs.alone_loss
            result.alone_loss_mean, result.parallel_loss = refs.alone_loss_mean, refs.parallel_loss
            result.baseline_loss = refs.baseline_loss
            result.margin_noise, result.margin_windows = _margin_noise(observer, refs)
        except KeyboardInterrupt:
            result.interrupted = True
            console.print("[yellow]interrupted: reference runs stopped[/]")
        result.reference_seconds = round(time.time() - t_ref, 1)
    result.wall_seconds = round(time.time() - t0, 1)
    if o.report:
        from woolf.report.build import build_report  # deferred: loads torch, matplotlib

        result.report = str(build_report(observer, root / "report", demo=result.to_json())["html"])
    return result


def _check_lora(lora: str | None, overrides: dict[str, str]) -> str:
    """Before anything is built: the demo's workload trains LoRA and the rank is within the ledger's limit.
    Returns the targets in words ("" without LoRA)."""
    if lora is None:
        return ""
    if importlib.util.find_spec("peft") is None:  # the workers would each die of the ImportError
        raise UsageError("--lora trains adapters with peft, which is not installed", hint="pip install 'peft>=0.21' "
                         "(it comes with the hf extra: pip install -e '.[hf]')")
    cfg = apply_overrides(LedgerConfig(), overrides)
    spec = parse_lora(lora)
    params = {k: v for k, v in cfg.workload.params.items() if k != LORA_PARAM}  # a workload without LoRA: no such param
    wl = load_workload(replace(cfg.workload, params=params))
    if LORA not in features_of(wl):
        raise UsageError(f"--lora: the {cfg.workload.name} workload does not train LoRA adapters",
                         hint="use the demo's charlm workload, or drop --lora")
    if spec.r > cfg.limits.max_lora_rank:
        raise UsageError(f"--lora r={spec.r} is above limits.max_lora_rank {cfg.limits.max_lora_rank}")
    if spec.targets:
        return "+".join(spec.targets)
    default = getattr(wl, "LORA_TARGETS", None)  # workloads/lora.py: None, every linear layer but the head
    return "+".join(default) if default else "every linear layer but the output head"


def _margin_noise(observer, refs) -> tuple[float | None, int]:
    """The benchmark noise of the ledger's margin over the best participant alone (demo/references.py)."""
    if not refs.alone_losses:
        return None, 0
    best = min(refs.alone_losses, key=refs.alone_losses.get)
    wl = observer.workload()
    final = window_losses(wl, observer.load_weights(observer.head()), gate_benchmark(observer))
    return margin_noise(final, refs.alone_windows.get(best))
