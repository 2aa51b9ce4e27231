"""A participant's LoRA contribution: adapters trained over the frozen version, sent as factor pairs.

Usage (contribute.train and submit.submit call these when LoRA is asked for):
    spec = lora_spec(ledger, "r=4")                   # --lora, else workload.params.lora; None: full training
    base = lora_base(ledger, wl, head, spec, device)  # the version in the frozen dtype (bf16: 2 bytes/param)
    evaluate, how = evaluation(wl, base)              # the ledger's evaluation, or the same in base's dtype
    trained, summary = train_lora(ledger, wl, head, base, data, steps, spec, device, seed, progress)
        # -> .woolf/work/lora.safetensors (the factors) and the trained weights base + B·A·scale
        #    (base is consumed: evaluate it first)
    with Merged(ledger, head) as m: m.into(trained, 0.5); m.save(path)   # the validator's merge, streamed
    pr = submit_lora(ledger, record, who, base, options)   # the factor file train wrote is the PR's delta

The trained weights that `train` keeps and evaluates are what the validator computes from the
factors (woolf/core/lora.py's expansion added to the version's float32 weights), in the frozen
base's dtype: where that is the ledger's evaluation dtype (``workload.params.eval_dtype``: float32
unless the ledger says bfloat16), the metrics a participant sees are those a validator records for
its delta merged at scale 1, bit for bit on the same device; otherwise they are the same evaluation
in the base's dtype (an estimate; before and after alike, the record says which).

Memory: one model, in the frozen dtype, and one float32 tensor. A bf16 base is read from the version's
file a tensor at a time and cast (the float32 masters are never whole in this process: 2 bytes per
parameter, not 4); the frozen model's parameters ARE those tensors, the evaluation model is built
uninitialised and assigned the same tensors, each target's merge is made from its float32 tensor read
again and cast, and the trained float32 file is written a tensor at a time (``Merged.save``).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

from woolf.errors import UsageError
from woolf.forges import forge_for
from woolf.ledger.submission import SubmitDeltaOptions, submit_delta
from woolf.participant.feedback import remember
from woolf.participant.state import mark_submitted, work_dir
from woolf.protocol.compress_spec import UNCOMPRESSED
from woolf.protocol.lora_spec import LoraSpec, parse_lora
from woolf.storage import kinds
from woolf.storage.files import hashes_of_file
from woolf.storage.weights import TRUSTED_LIMITS, read_spec
from woolf.storage.writer import write_stream
from woolf.workloads.features import LORA, features_of

FACTORS = "lora.safetensors"


def lora_spec(ledger, text: str | None, device: str | None = None) -> LoraSpec | None:
    """``--lora TEXT`` (``off`` turns a ledger default off), else ``workload.params.lora``; None: no LoRA.
    ``base=nf4`` is checked here, on ``device``, before anything is reserved or written: one line when
    the workload, bitsandbytes or the model cannot."""
    if text is None:
        text = ledger.config.workload.params.get("lora", "")
        if not isinstance(text, str):
            raise UsageError(f"workload.params.lora = {text!r}: use text such as \"r=16,alpha=32\"")
    try:
        spec = parse_lora(text)
    except ValueError as exc:
        raise UsageError(f"--lora {text}: {exc}", hint="e.g. --lora r=16,alpha=32,targets=q_proj+v_proj") from None
    if spec is None:
        return None
    if ledger.config.workload.command:
        raise UsageError("--lora trains in-process; this ledger trains with an external command (workload.command)")
    wl = ledger.workload()
    if LORA not in features_of(wl):
        raise UsageError(f"the {ledger.config.workload.name} workload does not train LoRA adapters",
                         hint="LoRA needs a workload that declares it (transformers, charlm); "
                              "drop --lora here")
    if not kinds.LORA.accepted_by(ledger.config.delta.accept):
        accepted = ", ".join(ledger.config.delta.accept)
        raise UsageError(f"this ledger does not accept lora deltas (delta.accept: {accepted})",
                         hint="drop --lora, or ask the maintainer to add lora to delta.accept")
    if spec.r > ledger.config.limits.max_lora_rank:
        raise UsageError(f"--lora r={spec.r} is above this ledger's limits.max_lora_rank "
                         f"{ledger.config.limits.max_lora_rank}")
    if spec.base and not getattr(wl, "LORA_NF4", False):
        raise UsageError(f"--lora {spec.text()}: the {ledger.config.workload.name} workload has no quantized base "
                         "(QLoRA is the transformers workload's)", hint="drop base=nf4")
    problem = wl.nf4_problem(device or "cpu") if spec.base else None
    if problem:
        raise UsageError(problem)
    return spec


def lora_base(ledger, wl, head, spec: LoraSpec, device: str) -> dict:
    """Version ``head``'s weights in the frozen base's dtype (workloads/lora.py ``compute_dtype``), on ``device``.

    float32 on the CPU: ``ledger.load_weights`` (the frozen model's parameters ARE these tensors). Any other
    dtype or device: read from the version's verified file one tensor at a time, each cast and placed as it
    is read (``read_as``): the float32 masters are never whole in this process, only one tensor of them."""
    import torch  # deferred: torch

    from woolf.workloads.lora import compute_dtype  # deferred: peft

    if spec.base:  # QLoRA: the float32 masters read as they are quantized (workloads/hf/qlora.py)
        from woolf.storage.lazy import LazyTensors  # deferred: loads torch

        return Quantized(LazyTensors.open(ledger.weights_path(head), TRUSTED_LIMITS, label="weights"))
    dtype = compute_dtype(wl, spec, device)
    if dtype == torch.float32 and torch.device(device).type == "cpu":
        return ledger.load_weights(head)
    return read_as(ledger.weights_path(head), dtype, device)


def read_as(path: Path, dtype, device: str = "cpu") -> dict:
    """{name: tensor} of a verified weights file, floating tensors in ``dtype`` on ``device``, read one tensor
    at a time into one reused buffer (plain reads, not a memory map: no page of the file counts as this
    process's memory)."""
    from woolf.storage.lazy import LazyTensors  # deferred: loads torch

    masters = LazyTensors.open(path, TRUSTED_LIMITS, label="weights")
    try:
        buf, out = masters.scratch(), {}
        for name in masters:
            t = masters.read_into(name, buf)
            out[name] = t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype, copy=True)
        return out
    finally:
        masters.close()


def evaluation(wl, base: dict) -> tuple:
    """(evaluate(weights, benchmark, device), what the record says of it) for a LoRA run whose weights are
    ``base``'s dtype: the ledger's own evaluation when that is its ``eval_dtype`` (the numbers a validator
    records, bit for bit on the same device), else the same evaluation in the base's dtype: an estimate
    (before and after both measured here, so the predicted gate compares like with like)."""
    import torch  # deferred: torch

    if isinstance(base, Quantized):
        return base.evaluate(wl), {"dtype": "nf4", "exact": False}
    dtype = next((t.dtype for t in base.values() if t.is_floating_point()), torch.float32)
    name, ledger = str(dtype).replace("torch.", ""), getattr(wl, "eval_dtype", "float32")
    if name == ledger:
        return wl.evaluate, {"dtype": name, "exact": True}

    def estimate(weights, benchmark, device):
        return wl.evaluate(weights, benchmark, device, dtype=dtype)

    return estimate, {"dtype": name, "ledger_dtype": ledger, "exact": False}


def train_lora(ledger, wl, head, base: dict, data, steps: int, spec: LoraSpec, device: str, seed: int,
               progress) -> tuple[dict, dict]:
    """(trained weights = base + each target's expansion, summary); the factors written to the work area.

    ``base`` (``lora_base``: version ``head``'s weights in the frozen dtype) is consumed: the dict comes
    back as the trained weights in that dtype, its untargeted tensors the base's own, each target the
    float32 arithmetic of record (the version's float32 tensor, read again from its file, plus the
    expansion) cast to that dtype one tensor at a time: the validator's merge at scale 1, in the
    base's dtype. Memory is one model in that dtype. Evaluate the base BEFORE this.
    """
    import torch  # deferred: torch

    from woolf.storage.kinds.lora_file import LoraFile  # deferred: loads torch

    path = ledger.weights_path(head)
    spec_in = read_spec(path, TRUSTED_LIMITS, f"version {head.version}")  # the float32 masters' spec
    if isinstance(base, Quantized):  # QLoRA: the quantized model is kept, its adapters attached, to evaluate
        keep: list = []
        factors, summary = wl.train_lora(base.masters, data, steps, spec, device=device, seed=seed,
                                         progress=progress, keep=keep)
        base.model = keep[0]
        trained = base.trained()
    else:
        dtype = next((t.dtype for t in base.values() if t.is_floating_point()), torch.float32)
        on = next((t.device for t in base.values()), torch.device(device))
        factors, summary = wl.train_lora(base, data, steps, spec, device=device, seed=seed, progress=progress)
    delta = LoraFile(factors, spec_in, ledger.config.limits.max_lora_rank)  # checked as a validator would
    out = work_dir(ledger) / FACTORS
    delta.write(out)
    if not isinstance(base, Quantized):
        if not base:  # the frozen model held its own copies (another device): the version's weights again
            base.update(read_as(path, dtype, str(on)))
        with Merged(ledger, head) as merged:
            merged.into(base, 1.0, masters_held=dtype == torch.float32 and on.type == "cpu")
        trained = base
    summary["lora"] = {**summary.get("lora", {}), "file": FACTORS, "bytes": out.stat().st_size,
                       "dense_bytes": sum(4 * math.prod(s) for d, s in spec_in.values() if d.startswith("F"))}
    return trained, summary


def rescale(ledger, head, trained, scale: float) -> None:
    """``trained`` (train_lora's) made the validator's merge of this PR at ``scale`` (the predicted gate's)."""
    if isinstance(trained, Quantized):
        trained.rescale(scale)
        return
    with Merged(ledger, head) as merged:
        merged.into(trained, scale)


class Quantized:
    """A QLoRA run's weights as `train` sees them: the version's float32 masters (read lazily, quantized as the
    frozen model is built) and, once trained, that NF4 model with the trained adapters. Its evaluations are
    of the model itself (workload ``evaluate_model``): the base with the adapters disabled, the trained
    weights with them attached (base + B·A·scale: the merge, for evaluation, without a merged copy), both
    an estimate of the validator's float32 numbers (the NF4 base is not the masters)."""

    def __init__(self, masters, model=None, adapters: bool = False):
        self.masters, self.model, self.adapters = masters, model, adapters
        self.scales: dict | None = None

    def trained(self) -> Quantized:
        return Quantized(self.masters, self.model, adapters=True)

    def evaluate(self, wl):
        def evaluate(weights: Quantized, benchmark: bytes, device: str):
            if weights.model is None:
                return None  # before training: measured after it with the adapters off (B = 0 at the start)
            if weights.adapters:
                return wl.evaluate_model(weights.model, benchmark, device)
            with weights.model.disable_adapter():
                return wl.evaluate_model(weights.model, benchmark, device)

        return evaluate

    def rescale(self, scale: float) -> None:
        """Every adapter's scale times ``scale`` (of its trained value): base + scale·B·A·alpha/r."""
        from peft.tuners.lora import LoraLayer  # deferred: peft

        layers = [m for m in self.model.modules() if isinstance(m, LoraLayer)]
        if self.scales is None:
            self.scales = {id(m): m.scaling["default"] for m in layers}
        for m in layers:
            m.scaling["default"] = self.scales[id(m)] * scale


class Merged:
    """The validator's merge of the work area's factor file into version ``head``, target by target: the
    version's float32 tensor (read from its verified file) plus ``scale`` times the target's expansion
    (core/merge.py ``apply_delta``, storage/kinds/lora_file.py ``LoraTensors``: the arithmetic of record).
    One tensor in memory at a time. A context manager (its files stay open inside it)."""

    def __init__(self, ledger, head):
        from woolf.storage.kinds.lora_file import LoraTensors  # deferred: loads torch
        from woolf.storage.lazy import LazyTensors  # deferred: loads torch

        self.path = ledger.weights_path(head)
        self.spec = read_spec(self.path, TRUSTED_LIMITS, f"version {head.version}")
        self.delta = LoraTensors.open(work_dir(ledger) / FACTORS, ledger.config.limits, expect=self.spec,
                                      label="lora delta")
        self.masters = LazyTensors.open(self.path, TRUSTED_LIMITS, label="weights")
        self.targets = set(self.delta.targets)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.delta.close()
        self.masters.close()

    def tensor(self, name: str, scale: float = 1.0, master=None):
        """The float32 (or the file's dtype) tensor ``name`` of the merge at ``scale``; ``master``: the
        version's tensor when the caller holds it already (not read again)."""
        from woolf.core.merge import apply_delta  # deferred: loads torch

        cur = self.masters[name] if master is None else master
        if name not in self.targets:
            return cur
        return apply_delta({name: cur}, {name: self.delta[name]}, scale)[name]

    def into(self, weights: dict, scale: float, masters_held: bool = False) -> None:
        """Each target of ``weights`` replaced by its merge at ``scale``, in ``weights``' dtype and device, one
        at a time (the old tensor freed as it goes); untargeted ones untouched (the merge leaves them bit for
        bit). ``masters_held``: ``weights`` holds the version's float32 tensors (the CPU's float32 base)."""
        for name in sorted(self.targets):
            held = weights[name]
            weights[name] = self.tensor(name, scale, held if masters_held else None).to(
                device=held.device, dtype=held.dtype)

    def save(self, out: Path) -> tuple[str, str]:
        """The merge at scale 1, every tensor, as a safetensors file at ``out`` (written by temp file and
        rename), produced one tensor at a time: (md5, sha256)."""
        import torch  # deferred: torch

        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        os.close(fd)
        try:
            layout = {n: (torch.empty(0, dtype=self.masters.dtype_of(n)).numpy().dtype, s)  # float32 masters
                      for n, (_, s) in self.spec.items()}
            hashes = write_stream(layout, lambda n: self.tensor(n).numpy(), Path(tmp))
            os.replace(tmp, out)
            return hashes
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class TrainedFactors:
    """The factor file `train` wrote, sent as it is (never read into tensors and written again): copied
    into the outgoing file, hashed, and checked there as a validator checks it, so the bytes checked
    are the bytes sent."""

    def __init__(self, path: Path, spec: dict, limits):
        self.path, self.spec, self.limits = path, spec, limits
        self.declared = kinds.LORA.declared()

    def write(self, out: Path) -> tuple[str, str]:
        """(md5, sha256) of the copy at ``out``; InvalidWeightsError (nothing left at ``out``) when it fails a check."""
        from woolf.storage.kinds.lora_file import LoraFile, LoraTensors  # deferred: loads torch

        shutil.copyfile(self.path, out)
        try:
            opened = LoraTensors.open(out, self.limits, expect=self.spec, label="lora delta")
            try:  # the rules of the file's header, then its values (finite, not all zero)
                LoraFile({t: (A, B, s) for t, A, B, s in opened.factor_pairs()}, self.spec,
                         self.limits.max_lora_rank)
            finally:
                opened.close()
            return hashes_of_file(out)
        except BaseException:
            out.unlink(missing_ok=True)
            raise


def submit_lora(ledger, record: dict, who: str, base, o) -> dict:
    """The work area's factor file, as `train` wrote it, as a `lora` PR on ``base`` (options ``o``: SubmitOptions)."""
    cfg = ledger.config
    if o.compress not in (None, UNCOMPRESSED):
        raise UsageError("--compress does not apply to a LoRA contribution: its factors are sent as they are")
    if not kinds.LORA.accepted_by(cfg.delta.accept):
        raise UsageError(f"this ledger does not accept lora deltas (delta.accept: {', '.join(cfg.delta.accept)})")
    path = work_dir(ledger) / FACTORS
    if not path.exists():
        raise UsageError(f"{path} is missing", hint="`woolf train --lora ...` again")
    spec = read_spec(ledger.weights_path(base), TRUSTED_LIMITS, f"version {base.version}")
    result = submit_delta(ledger, TrainedFactors(path, spec, cfg.limits), base, SubmitDeltaOptions(
        who=who, message=o.message, the_forge=forge_for(ledger, o.forge), record=record,
        delta_url_base=o.delta_url_base, delta_remote=o.delta_remote, prechecked=True))
    mark_submitted(ledger, result["id"])
    remember(ledger, result["id"], result.pop("pointer"), result.pop("declared"))
    return {**result, "error_feedback": ""}
