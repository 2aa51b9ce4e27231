"""Built-in workload `transformers`: any causal LM the installed transformers builds from a config.

Usage:
    wl = Transformers(model="ledger/model", files={"config.json": sha, "tokenizer.json": sha})
    wl.bind(lambda rel: ledger.git.show_bytes(f"origin/main:{rel}"))   # Ledger.workload() does this
    w1, summary = wl.train(w0, wl.default_data("alice", 0), steps=20, device="cuda")
    wl.evaluate(w1, wl_benchmark)     # {"loss": nats per token, "ppl": perplexity}
    wl.window_losses(w1, data, [3, 0, 7])   # each window's loss (windows(data): count, tokens each)
    wl.FEATURES                       # state_dir, global_step, follow, fingerprint, bind, windows

The model's config and tokenizer are committed in the ledger (``model``) and
pinned by sha256 in ``files``; ``bind`` reads them and refuses other bytes.
Weights are the checkpoint's tensors (tied copies once) in ``dtype``: float32 master
weights for a bf16/fp16 checkpoint (``checkpoint_dtype`` remembers what it was; a ledger
made before float32 masters keeps ``dtype = "bfloat16"`` and works as it did); training
runs in float32 (with ``autocast`` = "bf16"/"fp16" on the device) and
``grad_accum`` micro-batches per step; evaluation always runs in float32, in
eval mode, over fixed non-overlapping windows, so it is deterministic on CPU.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from woolf.errors import (
    ConfigError,
    IntegrityError,
    InvalidWeightsError,
    UsageError,
)
from woolf.protocol.lora_spec import parse_lora
from woolf.workloads.base import Progress, TrainData, enable_checkpointing, train_summary
from woolf.workloads.features import (
    BIND,
    DISTRIBUTED,
    FINGERPRINT,
    FOLLOW,
    GLOBAL_STEP,
    IN_PLACE,
    LORA,
    PROOF,
    STATE_DIR,
    WINDOWS,
)
from woolf.workloads.hf.evaluation import TokenCache, window_loss, window_losses
from woolf.workloads.hf.modeldir import (
    MODEL_DIR,
    REQUIRED,
    SAFE_NAME,
    build_config,
    canonical,
    load_tokenizer,
    max_positions,
    transformers_version,
)
from woolf.workloads.hf.qlora import frozen_nf4, nf4_problem
from woolf.workloads.hf.training import (
    AUTOCAST,
    assign,
    fit,
    frozen,
    out_of_memory,
    uninitialised,
    use_fsdp,
)
from woolf.workloads.parallel import Parallel
from woolf.workloads.textcommon import TextCorpus
from woolf.workloads.userdata import user_texts

DTYPES = ("float32", "float16", "bfloat16", "float64")
EVAL_DTYPES = ("float32", "bfloat16")  # workload.params.eval_dtype: the ledger's evaluations (docs/workloads.md)


class Transformers(TextCorpus):
    name = "transformers"
    FEATURES = frozenset({STATE_DIR, GLOBAL_STEP, FOLLOW, FINGERPRINT, BIND, IN_PLACE, DISTRIBUTED, LORA, WINDOWS,
                          PROOF})

    def __init__(self, model: str = MODEL_DIR, files: dict | None = None, dtype: str = "float32",
                 transformers: str = "", context: int = 128, batch_size: int = 8, grad_accum: int = 1,
                 lr: float = 1e-4, weight_decay: float = 0.0, warmup_steps: int = 0, autocast: str = "",
                 eval_batch: int = 8, benchmark_bytes: int = 32768, shard_files: int = 8,
                 checkpoint_dtype: str = "", checkpointing: bool = False, compile: bool = False,
                 lora: str = "", optimizer_warmup: int = 0, eval_dtype: str = "float32"):
        files = dict(files or {})
        where = "ledger/woolf.toml: workload.params"
        missing = [n for n in REQUIRED if n not in files]
        if missing:
            raise ConfigError(f"{where}.files lacks {missing}",
                              hint="create the ledger with `woolf init --workload transformers --weights DIR`")
        odd = [n for n in files if not isinstance(n, str) or not SAFE_NAME.fullmatch(n)]
        if odd:  # names become paths in ledger/model/ and in an export: no "..", no absolute paths
            raise ConfigError(f"{where}.files names {str(odd[0])[:80]!r}, not a model file name",
                              hint="create the ledger with `woolf init --workload transformers --weights DIR`")
        if autocast not in AUTOCAST:
            raise ConfigError(f"{where}.autocast = {autocast!r}", hint="use \"\", \"bf16\" or \"fp16\"")
        for key, value in (("dtype", dtype), ("checkpoint_dtype", checkpoint_dtype or dtype)):
            if value not in DTYPES:
                raise ConfigError(f"{where}.{key} = {value!r}", hint=f"use one of {', '.join(DTYPES)}")
        self.checkpoint_dtype = checkpoint_dtype or dtype
        if eval_dtype not in EVAL_DTYPES:
            raise ConfigError(f"{where}.eval_dtype = {eval_dtype!r}", hint=f"use one of {', '.join(EVAL_DTYPES)}")
        self.eval_dtype = eval_dtype  # what every benchmark evaluation of this ledger computes in
        for key, value in (("checkpointing", checkpointing), ("compile", compile)):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{key} = {value!r}", hint="use true or false")
        self.checkpointing, self.compile = checkpointing, compile
        try:  # the ledger's default LoRA training (`woolf train --lora` overrides it)
            self.lora = parse_lora(lora) if isinstance(lora, str) else parse_lora("?")
        except ValueError as exc:
            raise ConfigError(f"{where}.lora = {lora!r}: {exc}") from None
        if not isinstance(optimizer_warmup, int) or isinstance(optimizer_warmup, bool) or optimizer_warmup < 0:
            raise ConfigError(f"{where}.optimizer_warmup = {optimizer_warmup!r}", hint="use an integer >= 0")
        self.optimizer_warmup = optimizer_warmup  # over each AdamW's own first steps (textcommon.py)
        for key, value in (("context", context), ("batch_size", batch_size), ("grad_accum", grad_accum),
                           ("eval_batch", eval_batch), ("benchmark_bytes", benchmark_bytes)):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{where}.{key} = {value!r}", hint="use an integer > 0")
        self.model_dir, self.files, self.dtype, self.pinned = model, files, dtype, transformers
        self.context, self.batch_size, self.grad_accum = context, batch_size, grad_accum
        self.lr, self.weight_decay, self.warmup_steps, self.autocast = lr, weight_decay, warmup_steps, autocast
        self.eval_batch, self.benchmark_size, self.shard_files = eval_batch, benchmark_bytes, shard_files
        self._blobs: dict[str, bytes] | None = None
        self._model = self._config = self._tok = None
        self._texts = TokenCache()  # token ids of the texts evaluated lately (hf/evaluation.py)

    # -- the model's files -------------------------------------------------------
    def bind(self, read: Callable[[str], bytes | None]) -> None:
        """Read the pinned files through ``read(ledger path) -> bytes | None`` and check their sha256."""
        blobs = {}
        for name, sha in self.files.items():
            rel = f"{self.model_dir}/{name}"
            data = read(rel)
            if data is None:
                raise IntegrityError(f"{rel} is missing from the ledger (pinned in workload.params.files)")
            if hashlib.sha256(data).hexdigest() != sha:
                raise IntegrityError(f"{rel} does not match its sha256 in workload.params.files",
                                     hint="the model's files never change after `woolf init`; restore them")
            blobs[name] = data
        self._blobs = blobs
        self._check_version()
        _ = self.config  # a config that transformers cannot build, or a bad context, fails here

    def _check_version(self) -> None:
        have = transformers_version()
        if self.pinned and self.pinned.split(".")[:2] != have.split(".")[:2]:
            raise ConfigError(f"this ledger's model was imported with transformers {self.pinned}; "
                              f"this machine has {have}, whose model code may differ",
                              hint=f'pip install "transformers=={self.pinned}"')

    def model_files(self) -> dict[str, bytes]:
        """The pinned model files by name (config.json, tokenizer.json, ...), as bind checked them."""
        return dict(self._require())

    def _require(self) -> dict[str, bytes]:
        if self._blobs is None:
            raise UsageError("the transformers workload has no model files",
                             hint="open it through its ledger: Ledger.open(path).workload()")
        return self._blobs

    @property
    def config(self):
        if self._config is None:
            self._config = build_config(self._require()["config.json"], f"{self.model_dir}/config.json")
            self._config.use_cache = False
            limit = max_positions(self._config)
            if limit and self.context > limit:
                raise ConfigError(f"ledger/woolf.toml: workload.params.context = {self.context}, but the model "
                                  f"takes at most {limit} positions", hint=f"set workload.params.context <= {limit}")
        return self._config

    @property
    def tokenizer(self):
        if self._tok is None:
            self._tok = load_tokenizer(self._require()["tokenizer.json"], self.config,
                                       f"{self.model_dir}/tokenizer.json")
        return self._tok

    def model(self, seed: int | None = None) -> torch.nn.Module:
        """A float32 instance of the architecture (one per workload object, reused). Unseeded it is left
        uninitialised (its parameters are always assigned: ``_load``), so it touches no memory."""
        from transformers import AutoModelForCausalLM  # deferred: transformers

        if seed is not None:
            torch.manual_seed(seed)
            return AutoModelForCausalLM.from_config(self.config, dtype=torch.float32)
        if self._model is None:
            self._model = uninitialised(self.config, torch.float32)
        return self._model

    def fingerprint(self) -> str:
        return f"transformers:{self.config.model_type}:{self.files['config.json'][:12]}:c{self.context}"

    def genesis(self, seed: int = 0) -> dict[str, torch.Tensor]:
        """Seeded random weights of the architecture (a ledger's genesis is its imported checkpoint)."""
        return {k: v.to(getattr(torch, self.dtype)).clone().contiguous()
                for k, v in canonical(self.model(seed)).items()}

    def _load(self, weights: dict[str, torch.Tensor], device: str, copy: bool = False) -> torch.nn.Module:
        """The model with ``weights`` as its parameters (training.py: ``assign``; shared, not copied,
        unless ``copy`` or they need another dtype or device)."""
        model = self.model()
        names = set(canonical(model))
        if set(weights) != names:
            raise InvalidWeightsError("weights are not this model's: "
                                      f"missing {sorted(names - set(weights))[:4]}, "
                                      f"unexpected {sorted(set(weights) - names)[:4]}")
        return assign(model, weights, device, copy)

    # -- data --------------------------------------------------------------------


    def data_from_path(self, path: str) -> TrainData:
        return user_texts(path)  # text files only (userdata.py); train() checks there are enough tokens

    def tokens(self, texts: list[bytes]) -> torch.Tensor:
        """Token ids of ``texts`` in order, separated by the end-of-text token when the model has one."""
        eos = self.config.eos_token_id
        eos = eos[0] if isinstance(eos, list) else eos
        ids: list[int] = []
        for text in texts:
            ids.extend(self.tokenizer.encode(text.decode("utf-8", "replace"), add_special_tokens=False).ids)
            if eos is not None and 0 <= eos < self.config.vocab_size:
                ids.append(eos)
        return torch.tensor(ids, dtype=torch.long)

    # -- training ----------------------------------------------------------------

    def train(self, weights, data: TrainData, steps: int, device: str = "cpu", seed: int = 0,
              progress: Progress | None = None, state_dir: Path | None = None, global_step: int = 0,
              follow=None, follow_every: int = 0, in_place: bool = False, proof=None):
        """``steps`` AdamW steps of ``grad_accum`` micro-batches each; the same contract as charlm's.

        ``in_place``: the given tensors become the parameters and are trained where they are
        (the caller's dict then holds the trained weights; float32 on the CPU: no copy at all).
        Under torchrun (woolf/workloads/parallel.py) every rank runs this with the same
        arguments and takes its rows of each global batch; rank 0 returns the weights, the
        others ``{}``.
        """
        ids = self.tokens(data.texts)
        if len(ids) < self.context + 2:
            raise UsageError(f"training data has {len(ids)} tokens; one window needs {self.context + 2}")
        par = Parallel.current()
        if par and self.batch_size < par.world:
            raise UsageError(f"workload.params.batch_size = {self.batch_size} rows cannot be shared by "
                             f"{par.world} processes", hint=f"use at most {self.batch_size} processes")
        if par and follow is not None:
            raise UsageError("following main while training is not supported on several processes",
                             hint="set workload.follow_every = 0, or train on one process")
        model = self._load(weights, device, copy=not in_place).train()
        names = list(canonical(model))
        sharded = bool(par) and use_fsdp(model, device)
        if self.checkpointing:
            enable_checkpointing(model)
        try:
            losses, secs, resumed, amp = fit(self, model, ids, steps, device, seed, progress, state_dir,
                                             global_step, follow, follow_every, par, sharded, proof)
            state = par.full_state(model, sharded) if par else dict(model.state_dict())
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            if not isinstance(exc, torch.OutOfMemoryError) and "can't allocate memory" not in str(exc):
                raise
            raise out_of_memory(self, device, len(names) and sum(w.numel() for w in weights.values())) from None
        finally:
            if self.checkpointing and not sharded:
                model.gradient_checkpointing_disable()
            if par:
                self._model = None  # wrapped (DDP hooks) or sharded: the next call builds a fresh one
        dtype = getattr(torch, self.dtype)
        out = {k: state[k].detach().to("cpu", dtype, copy=not in_place) for k in names} if state else {}
        del state
        return out, train_summary(steps, secs, losses, steps * self.grad_accum * self.batch_size * self.context,
                                  data, optimizer=resumed, device=device, processes=par.world if par else 1,
                                  sharded=sharded, checkpointing=self.checkpointing,
                                  autocast=str(amp).replace("torch.", "") if amp else "off")

    def train_lora(self, weights, data: TrainData, steps: int, spec, device: str = "cpu", seed: int = 0,
                   progress: Progress | None = None, keep: list | None = None, state=None, proof=None):
        """({target tensor: (A, B, scale)}, summary): LoRA adapters trained with peft (workloads/lora.py).
        ``weights`` is consumed (cast in place to the compute dtype; emptied for a GPU: training.py ``frozen``)."""
        from woolf.workloads.lora import train_lora  # deferred: peft

        return train_lora(self, weights, data, steps, spec, device, seed, progress, keep=keep, state=state,
                          proof=proof)

    def nf4_problem(self, device: str) -> str | None:
        """Why ``--lora base=nf4`` cannot run here (bitsandbytes, or a model without linear layers), or None."""
        return nf4_problem(device, self.config)

    # what the LoRA trainer (workloads/lora.py) asks: the frozen model, batches and loss (LORA_TARGETS None:
    # every linear layer but the output head, attention and MLP: benchmarks/RESULTS.md §22)
    LORA_TARGETS = None

    LORA_NF4 = True  # base=nf4 (QLoRA): lora_model quantizes the frozen base (hf/qlora.py)

    def lora_model(self, weights, device: str, dtype: torch.dtype, base: str = "") -> torch.nn.Module:
        self._model = None  # the evaluation model's hold on the weights goes (rebuilt, uninitialised, when needed)
        if base == "nf4":  # bitsandbytes is imported there, when asked for (optional: the qlora extra)
            return frozen_nf4(self.config, weights, device, dtype)
        return frozen(self.config, weights, device, dtype)

    def lora_batches(self, data: TrainData, gen: torch.Generator):
        ids = self.tokens(data.texts)
        if len(ids) < self.context + 2:
            raise UsageError(f"training data has {len(ids)} tokens; one window needs {self.context + 2}")
        return self._windows(ids, gen)

    def _windows(self, ids: torch.Tensor, gen: torch.Generator):
        while True:
            ix = torch.randint(len(ids) - self.context - 1, (self.batch_size,), generator=gen)
            yield (torch.stack([ids[i : i + self.context] for i in ix]),
                   torch.stack([ids[i + 1 : i + 1 + self.context] for i in ix]))

    def lora_loss(self, model, batch) -> torch.Tensor:
        x, y = batch
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))

    # -- evaluation: fixed windows of ``context`` tokens (WINDOWS, features.py; hf/evaluation.py) -----------
    LINEAR_METRICS = {"loss": 1.0}  # metrics that are a multiple of the loss (perplexity is not)

    @property
    def stored_dtype(self) -> torch.dtype:
        """The checkpoint's own floating dtype where it is bf16 (LoRA's frozen base on a CPU: workloads/lora.py);
        float32 otherwise (fp16 and float32 checkpoints: a CPU computes float32)."""
        return torch.bfloat16 if self.checkpoint_dtype == "bfloat16" else torch.float32

    def windows(self, data: bytes) -> tuple[int, int]:
        """(windows of ``data``, tokens predicted in each): non-overlapping, ``context`` tokens each."""
        return max(0, (len(self._ids(data)) - 1) // self.context), self.context

    def metrics_of(self, loss: float) -> dict[str, float]:
        return {"loss": loss, "ppl": math.exp(min(loss, 50.0))}

    def window_losses(self, weights, data: bytes, index, device: str = "cpu") -> list[float]:
        """The mean loss (nats per token) of each window in ``index`` (windows(data)), in that order, computed
        in the ledger's ``eval_dtype`` as evaluate() does (the gate and scoring take means of these)."""
        index = list(index)
        if not index:
            return []
        model = self._eval_model(weights, device).eval()
        return window_losses(model, self._ids(data), index, self.context, self.eval_batch, device)

    @torch.no_grad()
    def evaluate(self, weights, benchmark: bytes, device: str = "cpu", dtype: torch.dtype | None = None
                 ) -> dict[str, float]:
        """Per-token loss (nats) and perplexity over fixed windows of ``context`` tokens (the mean of
        window_losses over every window), computed in the ledger's ``eval_dtype`` (float32 unless the ledger
        says bfloat16), or in ``dtype`` when given (a LoRA participant's frozen dtype:
        participant/lora_weights.py)."""
        return self.evaluate_model(self._eval_model(weights, device, dtype), benchmark, device)

    def evaluate_model(self, model, benchmark: bytes, device: str = "cpu") -> dict[str, float]:
        """``evaluate`` of a model already built (a QLoRA participant's quantized one), in its dtype."""
        return window_loss(model, self._ids(benchmark), self.context, self.eval_batch, device)

    def _eval_model(self, weights, device: str, dtype: torch.dtype | None = None) -> torch.nn.Module:
        """The model evaluations compute with: in float32 the weights ARE its parameters; in another dtype an
        uninitialised model of that dtype holds their casts (its own memory: half the float32 weights' for bf16)."""
        want = dtype or getattr(torch, self.eval_dtype)
        if want == torch.float32:
            return self._load(weights, device)
        names = set(canonical(self.model()))
        if set(weights) != names:
            raise InvalidWeightsError(f"weights are not this model's: missing {sorted(names - set(weights))[:4]}")
        return assign(uninitialised(self.config, want), weights, device, copy=False)

    def _ids(self, data: bytes) -> torch.Tensor:
        """``data``'s token ids, kept for the last few texts (the benchmark and the scoring shards)."""
        return self._texts.ids(data, lambda: self.tokens([data]))
