"""A LoRA contribution's model-sized state: the frozen base in its dtype (or NF4), its evaluation, the merge.

Usage (woolf/participant/train.py and lora.py):
    base = lora_base(ledger, wl, head, spec, device)  # the version in the frozen dtype (bf16: 2 bytes/param), or
                                                      # Quantized (base=nf4: the masters, read as quantized)
    evaluate, how = evaluation(wl, base)              # the ledger's evaluation, or the same in base's dtype
    with Merged(ledger, head) as m:                   # the validator's merge of the work area's factor file,
        m.into(trained, 0.5); m.save(path)            # target by target, from the version's float32 file
    rescale(ledger, head, trained, 0.5)               # trained made the merge at that scale (the predicted gate)

The trained weights `train` keeps and evaluates are what the validator computes from the factors
(woolf/core/lora.py's expansion added to the version's float32 weights), in the frozen base's dtype:
where that is the ledger's evaluation dtype (``workload.params.eval_dtype``: float32 unless the
ledger says bfloat16), the metrics a participant sees are those a validator records for its delta
merged at scale 1, bit for bit on the same device; otherwise they are the same evaluation in the
base's dtype (an estimate; before and after alike, the record says which). A QLoRA run (``base=nf4``)
evaluates its NF4 model with the adapters off and on: an estimate too.

Memory: one model, in the frozen dtype, and one float32 tensor. A bf16 base is read from the version's
file a tensor at a time and cast (the float32 masters are never whole in this process: 2 bytes per
parameter, not 4); the frozen model's parameters ARE those tensors, the evaluation model is built
uninitialised and assigned the same tensors, each target's merge is made from its float32 tensor read
again and cast, and the trained float32 file is written a tensor at a time (``Merged.save``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from woolf.participant.state import work_dir
from woolf.protocol.lora_spec import LoraSpec
from woolf.storage.weights import TRUSTED_LIMITS, read_spec
from woolf.storage.writer import write_stream

FACTORS = "lora.safetensors"  # the factor file `train` writes in the work area (the PR's delta)


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
