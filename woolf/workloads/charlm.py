"""Built-in workload `charlm`: a small causal byte-level transformer.

Usage:
    wl = CharLM(d_model=64, n_layer=2)
    w0 = wl.genesis(seed=0)
    w1, summary = wl.train(w0, wl.default_data("alice", 0), steps=60)
    CharLM(domains=["p1", "p2", "p3"]).default_data("p2", 0)   # p2's own third of the corpus (charlm_data.py)
    factors, summary = wl.train_lora(w0, data, 15, parse_lora("r=4"))   # LoRA with peft (workloads/lora.py)
    wl.evaluate(w1, wl.benchmark_bytes())          # {"loss": nats per byte, "bpb": bits per byte}
    wl.window_losses(w1, data, [3, 0, 7])          # each window's loss (windows(data): count, bytes each)
    wl.FEATURES    # state_dir, global_step, follow, fingerprint, data_parallel, lora, windows (features.py)

Sized so that a useful contribution takes seconds on two CPU cores.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from woolf.errors import ConfigError, UsageError
from woolf.protocol.lora_spec import parse_lora
from woolf.workloads import corpus
from woolf.workloads.base import Progress, TrainData, apply_follow, train_summary
from woolf.workloads.charlm_data import check_domains, domain_shard
from woolf.workloads.features import (
    DATA_PARALLEL,
    FINGERPRINT,
    FOLLOW,
    GLOBAL_STEP,
    LORA,
    PROOF,
    SAMPLES,
    STATE_DIR,
    WINDOWS,
)
from woolf.workloads.optstate import load_optimizer, save_optimizer
from woolf.workloads.textcommon import TextCorpus
from woolf.workloads.userdata import user_texts


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, d_model: int, n_layer: int, n_head: int, context: int):
        super().__init__()
        self.tok = nn.Embedding(256, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 256, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class CharLM(TextCorpus):
    name = "charlm"
    # LoRA (workloads/lora.py): by default every linear layer of the blocks (the output head, the embeddings
    # and the LayerNorms stay frozen, as in common LoRA practice); float32 on every device, and every
    # activation kept (a 137k-parameter model's activations are a few MB: ``ckpt`` asks for nothing here)
    LORA_TARGETS = ("qkv", "proj", "mlp.0", "mlp.2")
    LORA_BF16 = False
    FEATURES = frozenset({STATE_DIR, GLOBAL_STEP, FOLLOW, FINGERPRINT, DATA_PARALLEL, LORA, WINDOWS, PROOF, SAMPLES})
    # what `woolf init --weights CHECKPOINT` sets for a pretrained genesis (ledger/create.py): a fresh
    # AdamW's first steps undo pretraining (first train 2.032 -> 2.050-2.079 without; benchmarks/RESULTS.md)
    PRETRAINED_DEFAULTS = {"optimizer_warmup": 60}

    def __init__(self, d_model: int = 64, n_layer: int = 2, n_head: int = 4, context: int = 64,
                 batch_size: int = 16, lr: float = 3e-3, benchmark_bytes: int = 32768,
                 shard_files: int = 8, warmup_steps: int = 0, domains: list[str] | None = None,
                 optimizer_warmup: int = 0, lora: str = ""):
        self.d_model, self.n_layer, self.n_head, self.context = d_model, n_layer, n_head, context
        self.batch_size, self.lr = batch_size, lr
        self.benchmark_size, self.shard_files = benchmark_bytes, shard_files
        self.warmup_steps = warmup_steps  # linear warm-up over the ledger's global steps
        self.domains = check_domains(domains) if domains is not None else []  # charlm_data.py
        if not isinstance(optimizer_warmup, int) or isinstance(optimizer_warmup, bool) or optimizer_warmup < 0:
            raise UsageError(f"workload.params.optimizer_warmup must be an integer >= 0, got {optimizer_warmup!r}")
        self.optimizer_warmup = optimizer_warmup  # linear warm-up over each AdamW's own first steps
        try:  # the ledger's default LoRA training (`woolf train --lora` overrides it; workloads/lora.py)
            self.lora = parse_lora(lora) if isinstance(lora, str) else parse_lora("?")
        except ValueError as exc:
            raise ConfigError(f"workload.params.lora = {lora!r}: {exc}") from None

    def model(self) -> TinyGPT:
        return TinyGPT(self.d_model, self.n_layer, self.n_head, self.context)

    def genesis(self, seed: int = 0) -> dict[str, torch.Tensor]:
        torch.manual_seed(seed)
        return {k: v.detach().clone().contiguous() for k, v in self.model().state_dict().items()}

    def default_data(self, contributor: str, base_version: int) -> TrainData:
        """A shard of the whole pool, or of the contributor's own part when ``domains`` names it."""
        if contributor not in self.domains:
            return super().default_data(contributor, base_version)
        i, n = self.domains.index(contributor), len(self.domains)
        files = domain_shard(contributor, i, n, base_version, self.shard_files)
        return TrainData([corpus.read(f) for f in files], f"domain {i + 1}/{n}:{contributor}@v{base_version}", files)

    def data_from_path(self, path: str) -> TrainData:
        return user_texts(path, min_bytes=self.context + 2)  # text files only; the path stays private

    def load_model(self, weights, device):
        m = self.model()
        m.load_state_dict(weights, strict=True)
        return m.to(device)

    def _text(self, data: TrainData) -> torch.Tensor:
        text = torch.frombuffer(bytearray(b"\n".join(data.texts)), dtype=torch.uint8).long()
        if len(text) < self.context + 2:
            raise UsageError("training data is shorter than one context window")
        return text

    def batches(self, data: TrainData, gen: torch.Generator):
        text = self._text(data)
        while True:
            ix = torch.randint(len(text) - self.context - 1, (self.batch_size,), generator=gen)
            yield (torch.stack([text[i : i + self.context] for i in ix]),
                   torch.stack([text[i + 1 : i + 1 + self.context] for i in ix]))

    def sample_windows(self, data: TrainData, gen: torch.Generator, steps: int) -> dict[str, torch.Tensor]:
        """What ``steps`` batches drawn from ``gen`` read (a private-data PR's audited samples):
        ``positions`` int64 [steps, batch] and ``windows`` uint8 [steps, batch, context + 1]."""
        text = self._text(data)
        pos = torch.stack([torch.randint(len(text) - self.context - 1, (self.batch_size,), generator=gen)
                           for _ in range(steps)])
        win = torch.stack([torch.stack([text[i : i + self.context + 1] for i in row]) for row in pos])
        return {"positions": pos, "windows": win.to(torch.uint8)}

    def sample_data(self, nbytes: int, samples: dict[str, torch.Tensor]) -> TrainData:
        """A text of ``nbytes`` holding only ``samples``' windows at their positions: the batches drawn from
        the generator the samples were drawn from read exactly those windows. ValueError for samples that do
        not fit (another shape, a position out of range, windows that disagree where they overlap)."""
        pos, win = samples.get("positions"), samples.get("windows")
        if (pos is None or win is None or pos.dtype != torch.int64 or win.dtype != torch.uint8 or pos.dim() != 2
                or tuple(win.shape) != (*pos.shape, self.context + 1) or pos.shape[1] != self.batch_size):
            raise ValueError("samples are not positions [steps, batch] and windows [steps, batch, context + 1]")
        if bool((pos < 0).any()) or bool((pos > nbytes - self.context - 2).any()):
            raise ValueError("a sample's position is outside the declared data")
        text = torch.zeros(nbytes, dtype=torch.uint8)
        seen = torch.zeros(nbytes, dtype=torch.bool)
        for i, w in zip(pos.reshape(-1).tolist(), win.reshape(-1, self.context + 1), strict=True):
            span = slice(i, i + self.context + 1)
            if bool((seen[span] & (text[span] != w)).any()):
                raise ValueError("samples disagree where their windows overlap")
            text[span], seen[span] = w, True
        return TrainData([bytes(text.numpy())], "private samples", [])


    def train(self, weights, data: TrainData, steps: int, device: str = "cpu", seed: int = 0,
              progress: Progress | None = None, state_dir: Path | None = None, global_step: int = 0,
              follow=None, follow_every: int = 0, proof=None):
        """``steps`` AdamW steps from ``weights``; with ``state_dir``, the optimizer's moments and
        step count carry over between calls (DiLoCo: new weights, same moments). With ``follow``
        (woolf/participant/follow.py), every ``follow_every`` steps the local weights move by whatever the
        ledger's main moved since (``follow()`` returns that shift, or None). ``proof``: the hook that
        commits to the path or replays a segment of it (woolf/workloads/proof.py)."""
        gen = torch.Generator().manual_seed(seed)
        batches = self.batches(data, gen)
        model = self.load_model(weights, device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=0.0)
        resumed = load_optimizer(opt, model, state_dir, self.fingerprint()) if state_dir else "fresh"
        done = int(next(iter(opt.state.values()), {}).get("step", 0)) if opt.state else 0
        first, last, done = (proof.begin(dict(model.named_parameters()), opt, gen, done, steps, device) if proof
                             else (0, steps, done))
        t0, losses = time.perf_counter(), []
        for step in range(first + 1, last + 1):
            for group in opt.param_groups:
                group["lr"] = self.lr_at(global_step + step - 1) * self.opt_factor(done + step - 1)
            x, y = (t.to(device) for t in next(batches))
            loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            apply_follow(model, follow, follow_every, step, steps)
            if proof:
                proof.step(step, loss, gnorm)
            if progress:
                progress(step, steps, losses[-1])
        secs = time.perf_counter() - t0
        if state_dir:
            save_optimizer(opt, model, state_dir, self.fingerprint())
        out = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        return out, train_summary(steps, secs, losses, steps * self.batch_size * self.context, data,
                                  optimizer=resumed)

    def train_lora(self, weights, data: TrainData, steps: int, spec, device: str = "cpu", seed: int = 0,
                   progress: Progress | None = None, state=None, proof=None):
        """({target tensor: (A, B, scale)}, summary): LoRA adapters trained with peft (workloads/lora.py)."""
        from woolf.workloads.lora import train_lora  # deferred: peft

        return train_lora(self, weights, data, steps, spec, device, seed, progress, state=state, proof=proof)

    # what the LoRA trainer (workloads/lora.py) asks of a workload: its frozen model, batches and loss
    def lora_model(self, weights, device: str, dtype: torch.dtype) -> TinyGPT:
        """A TinyGPT holding a copy of ``weights``, frozen (float32: ``LORA_BF16`` is off)."""
        model = self.load_model(weights, device)
        model.requires_grad_(False)
        return model

    def lora_batches(self, data: TrainData, gen: torch.Generator):
        return self.batches(data, gen)

    def lora_loss(self, model, batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x).view(-1, 256), y.view(-1))

    def train_data_parallel(self, weights, datas: list[TrainData], steps: int, device: str = "cpu",
                            seed: int = 0):
        """Synchronous data parallel: each step averages the gradients of one batch per worker
        (each from its own data), then one AdamW step; the bound for parallel training."""
        gens = [self.batches(d, torch.Generator().manual_seed(seed * 1009 + i)) for i, d in enumerate(datas)]
        model = self.load_model(weights, device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=0.0)
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = self.lr_at(step) * self.opt_factor(step)
            opt.zero_grad(set_to_none=True)
            for g in gens:
                x, y = (t.to(device) for t in next(g))
                (F.cross_entropy(model(x).view(-1, 256), y.view(-1)) / len(gens)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        return {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}

    def fingerprint(self) -> str:
        return f"charlm:d{self.d_model}:l{self.n_layer}:h{self.n_head}:c{self.context}"

    # -- evaluation: fixed windows of ``context`` bytes (WINDOWS, features.py) ----------------------------
    LINEAR_METRICS = {"loss": 1.0, "bpb": 1 / math.log(2)}  # metrics that are a multiple of the loss

    def windows(self, data: bytes) -> tuple[int, int]:
        """(windows of ``data``, bytes predicted in each): non-overlapping, ``context`` bytes each."""
        return max(0, (len(data) - 1) // self.context), self.context

    def metrics_of(self, loss: float) -> dict[str, float]:
        return {"loss": loss, "bpb": loss / math.log(2)}

    @torch.no_grad()
    def window_losses(self, weights, data: bytes, index, device: str = "cpu") -> list[float]:
        """The mean loss (nats per byte) of each window in ``index`` (windows(data)), in that order."""
        idx = torch.as_tensor(list(index), dtype=torch.long)
        if not len(idx):
            return []
        model = self.load_model(weights, device).eval()
        text = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        offsets = torch.arange(self.context)
        out: list[float] = []
        for i in range(0, len(idx), 256):
            at = idx[i : i + 256, None] * self.context + offsets
            logits = model(text[at].to(device)).float()
            loss = F.cross_entropy(logits.view(-1, 256), text[at + 1].to(device).reshape(-1), reduction="none")
            out += loss.view(len(at), self.context).mean(1).tolist()
        return out

    def evaluate(self, weights, benchmark: bytes, device: str = "cpu") -> dict[str, float]:
        """metrics_of the mean loss over every window."""
        n, _ = self.windows(benchmark)
        if n == 0:  # no window: the loss would read 0.0, a perfect score
            raise UsageError(f"the benchmark has {len(benchmark)} bytes, less than one window of {self.context + 1}")
        return self.metrics_of(math.fsum(self.window_losses(weights, benchmark, range(n), device)) / n)
