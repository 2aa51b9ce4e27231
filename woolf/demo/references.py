"""The reference lines every ledger run is judged against, at the same compute.

Usage:
    refs = reference_losses(ledger, ["p1", "p2", "p3"], rounds=8, steps=30)
    refs.alone_loss, refs.alone_loss_mean, refs.parallel_loss, refs.baseline_loss
    noise, n = margin_noise(window_losses(wl, final, bench), refs.alone_windows[best])  # 2 s.e., windows

- **alone**: each participant trains by itself with the same code, its own
  shards (those it would be given at versions 0..rounds-1) and the same steps it
  contributed, as one continuous run over all of them (one optimizer, data
  mixed: a stronger baseline than round by round, which measured 0.03 worse):
  what it gets by not joining. Reported as the best participant and the mean.
  With LoRA (the workload's ``lora`` param, `woolf demo --lora R`), each participant alone
  trains as it contributes: ``rounds`` contributions of ``steps`` LoRA steps on all of its
  shards, each one's exact product added to its own weights at scale 1 before the next
  (its adapters carried from one to the next, or fresh each time, as its PRs' are).
- **parallel**: synchronous data parallel with the same workers: every step
  averages one batch from each participant's data (the bound for parallel
  training with these workers and steps).
- **centralized** (baseline): one worker, all participants' data, all the steps
  in sequence.

The runs are independent, so they run in up to ``jobs`` processes at once.

Whether a margin means anything: the ledger and the best participant alone are scored on the same
benchmark windows, so the margin's benchmark noise is two standard errors of the per-window loss
difference (``margin_noise``). A "joining paid" by 0.0016 was printed as a win with nothing to say that
the benchmark cannot tell 0.0016 apart; the summary now says so. (Seed-to-seed variation is another,
larger noise: benchmarks/RESULTS.md §4 measures it over runs.)
"""

from __future__ import annotations

import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import torch

from woolf.core.lora import expand
from woolf.ledger.benchmark import gate_benchmark
from woolf.workloads.base import TrainData, load_workload
from woolf.workloads.features import DATA_PARALLEL, features_of


@dataclass
class References:
    alone_losses: dict[str, float] = field(default_factory=dict)
    alone_loss: float | None = None  # the best participant alone
    alone_loss_mean: float | None = None
    parallel_loss: float | None = None  # None: the workload has no data-parallel trainer
    baseline_loss: float | None = None  # centralized, sequential
    alone_windows: dict[str, list[float]] = field(default_factory=dict)  # per benchmark window, for the noise


@torch.no_grad()
def window_losses(wl, weights: dict, bench: bytes) -> list[float] | None:
    """The loss of each benchmark window, windowed as the workload evaluates (charlm's bytes; None for a
    workload without a byte-level model): their mean is the benchmark loss."""
    if not hasattr(wl, "load_model") or not hasattr(wl, "context"):
        return None
    model = wl.load_model(weights, "cpu").eval()
    data = torch.frombuffer(bytearray(bench), dtype=torch.uint8).long()
    n = (len(data) - 1) // wl.context
    x = data[: n * wl.context].view(n, wl.context)
    y = data[1 : n * wl.context + 1].view(n, wl.context)
    out: list[float] = []
    for i in range(0, n, 256):
        logits = model(x[i : i + 256]).float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[i : i + 256].reshape(-1),
                                                 reduction="none").view(-1, wl.context).mean(dim=1)
        out += loss.tolist()
    return out


def margin_noise(a: list[float] | None, b: list[float] | None) -> tuple[float | None, int]:
    """Two standard errors of the mean per-window difference of two models scored on the same windows
    (None when either is unknown or there are fewer than two windows), and the number of windows."""
    if not a or not b or len(a) != len(b) or len(a) < 2:
        return None, 0
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    return 2 * statistics.stdev(diffs) / len(diffs) ** 0.5, len(diffs)


def shards_of(wl, name: str, rounds: int) -> TrainData:
    texts, files = [], []
    for r in range(rounds):
        shard = wl.default_data(name, r)
        texts += shard.texts
        files += shard.files
    return TrainData(texts, f"shards:{name}@v0..{rounds - 1}", files)


def alone_lora(wl, genesis: dict, data: TrainData, rounds: int, steps: int, device: str = "cpu",
               seed: int = 0) -> dict:
    """A participant alone with LoRA: ``rounds`` contributions, each one's product merged at scale 1, its
    adapters carried from one to the next when the spec carries them (``carry``), as its PRs' are."""
    from woolf.workloads.lora import AdapterState  # deferred: peft

    weights = dict(genesis)
    carried = {"state": AdapterState()} if wl.lora.carry else {}
    for r in range(rounds):
        factors, _ = wl.train_lora(weights, data, steps, wl.lora, device=device, seed=seed * 1000 + r, **carried)
        for target, (A, B, scale) in sorted(factors.items()):
            s = float(torch.tensor(scale, dtype=torch.float32))  # the scale as a factor file carries it
            weights[target] = torch.add(weights[target], expand(A, B, s))
    return weights


def _run(task: tuple) -> tuple[str, float | None, list[float] | None]:
    kind, name, workload_cfg, genesis, bench, names, rounds, steps, device = task
    torch.set_num_threads(1)
    wl = load_workload(workload_cfg)
    if kind == "alone" and getattr(wl, "lora", None) is not None:  # as it contributes: LoRA, round by round
        weights = alone_lora(wl, genesis, shards_of(wl, name, rounds), rounds, steps, device)
    elif kind == "alone":  # one continuous run over all of its shards: the strongest lone baseline
        weights, _ = wl.train(genesis, shards_of(wl, name, rounds), rounds * steps, device=device, seed=0)
    elif kind == "parallel":
        if DATA_PARALLEL not in features_of(wl):
            return kind, None, None
        weights = wl.train_data_parallel(genesis, [shards_of(wl, n, rounds) for n in names],
                                         rounds * steps, device=device)
    else:
        texts, files = [], []
        for r in range(rounds):
            for n in names:
                shard = wl.default_data(n, r)
                texts += shard.texts
                files += shard.files
        weights, _ = wl.train(genesis, TrainData(texts, "centralized", files), len(names) * rounds * steps,
                              device=device, seed=0)
    windows = window_losses(wl, weights, bench) if kind == "alone" else None
    return f"{kind}:{name}", wl.evaluate(weights, bench, device)["loss"], windows


class _Serial:
    """``jobs=1``: the pool's map, in this process."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items):
        return map(fn, items)


def reference_losses(ledger, names: list[str], rounds: int, steps: int, device: str = "cpu",
                     jobs: int = 2, progress=None) -> References:
    genesis = ledger.load_weights(ledger.show(0))
    bench = gate_benchmark(ledger)  # the benchmark the validators judge by (hidden when configured)
    wcfg = ledger.config.workload
    tasks = [("centralized", "", wcfg, genesis, bench, names, rounds, steps, device),
             ("parallel", "", wcfg, genesis, bench, names, rounds, steps, device)]
    tasks += [("alone", n, wcfg, genesis, bench, names, rounds, steps, device) for n in names]
    results: dict[str, float | None] = {}
    refs = References()
    with ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else _Serial() as pool:
        for key, loss, windows in pool.map(_run, tasks):
            results[key] = loss
            if windows is not None:
                refs.alone_windows[key.split(":", 1)[1]] = windows
            if progress:
                progress(key, len(results), len(tasks))
    refs.alone_losses = {k.split(":", 1)[1]: v for k, v in results.items() if k.startswith("alone:")}
    if refs.alone_losses:
        refs.alone_loss = min(refs.alone_losses.values())
        refs.alone_loss_mean = statistics.mean(refs.alone_losses.values())
    refs.parallel_loss = results.get("parallel:")
    refs.baseline_loss = results.get("centralized:")
    return refs
