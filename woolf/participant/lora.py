"""A participant's LoRA contribution: adapters trained over the frozen version, sent as factor pairs.

Usage (contribute.train and submit.submit call these when LoRA is asked for):
    spec = lora_spec(ledger, "r=4", device)           # --lora, else workload.params.lora; None: full training
    base = lora_base(ledger, wl, head, spec, device)  # lora_weights.py: the version in the frozen dtype
    trained, summary = train_lora(ledger, wl, head, base, data, steps, spec, device, seed, progress)
        # -> .woolf/work/lora.safetensors (the factors) and the trained weights base + B·A·scale
        #    (base is consumed: evaluate it first)
    pr = submit_lora(ledger, record, who, base, options)   # the factor file train wrote is the PR's delta

What the trained weights are, how they are evaluated and what memory they take: lora_weights.py.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from woolf.errors import UsageError
from woolf.forges import forge_for
from woolf.ledger.submission import SubmitDeltaOptions, submit_delta
from woolf.participant.feedback import remember
from woolf.participant.lora_state import keep_adapters, load_adapters
from woolf.participant.lora_weights import FACTORS, Merged, Quantized, read_as
from woolf.participant.proof import keep_run, seal
from woolf.participant.state import mark_submitted, work_dir
from woolf.protocol.compress_spec import UNCOMPRESSED
from woolf.protocol.lora_spec import LoraSpec, parse_lora
from woolf.storage import kinds
from woolf.storage.files import hashes_of_file
from woolf.storage.weights import TRUSTED_LIMITS, read_spec
from woolf.workloads.features import LORA, features_of


def lora_spec(ledger, text: str | None, device: str | None = None) -> LoraSpec | None:
    """``--lora TEXT`` (``off`` turns a ledger default off), else ``workload.params.lora``; None: no LoRA.
    ``base=nf4`` is checked here, on ``device``, before anything is reserved or written: one line when
    the workload, bitsandbytes or the model cannot."""
    if text is not None and not text.strip():  # `--lora ''` would silently train every parameter
        raise UsageError("--lora '': an empty LoRA spec", hint="give one, e.g. --lora r=16, or --lora off to "
                                                                "train every parameter")
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


def train_lora(ledger, wl, head, base: dict, data, steps: int, spec: LoraSpec, device: str, seed: int,
               progress, proof=None) -> tuple[dict, dict]:
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
    state, start = load_adapters(ledger, wl, spec) if spec.carry else (None, None)  # refused: nothing changed
    carried = {"state": state} if state is not None else {}
    if isinstance(base, Quantized):  # QLoRA: the quantized model is kept, its adapters attached, to evaluate
        # no proof hook: an audit replays over the float32 version, not an NF4 model (recorded unverifiable)
        keep: list = []
        factors, summary = wl.train_lora(base.masters, data, steps, spec, device=device, seed=seed,
                                         progress=progress, keep=keep, **carried)
        base.model = keep[0]
        trained = base.trained()
    else:
        dtype = next((t.dtype for t in base.values() if t.is_floating_point()), torch.float32)
        on = next((t.device for t in base.values()), torch.device(device))
        more = {"proof": proof} if proof is not None and state is None else {}  # its chain (workloads/proof.py)
        factors, summary = wl.train_lora(base, data, steps, spec, device=device, seed=seed, progress=progress,
                                         **carried, **more)
    delta = LoraFile(factors, spec_in, ledger.config.limits.max_lora_rank)  # checked as a validator would
    out = work_dir(ledger) / FACTORS
    delta.write(out)
    if state is not None:  # for the next contribution (lora_state.py); the recipe names where this one began
        keep_adapters(ledger, wl, spec, state)
    summary["lora"] = {**summary.get("lora", {}), "recipe": spec.text(full=True), "start": start or {"start": "fresh"}}
    if not isinstance(base, Quantized):
        if not base:  # the frozen model held its own copies (another device): the version's weights again
            base.update(read_as(path, dtype, str(on)))
        with Merged(ledger, head) as merged:
            merged.into(base, 1.0, masters_held=dtype == torch.float32 and on.type == "cpu")
        trained = base
    summary["lora"] = {**summary.get("lora", {}), "file": FACTORS, "bytes": out.stat().st_size,
                       "dense_bytes": sum(4 * math.prod(s) for d, s in spec_in.values() if d.startswith("F"))}
    return trained, summary


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
        delta_url_base=o.delta_url_base, delta_remote=o.delta_remote, prechecked=True, seal=seal))
    mark_submitted(ledger, result["id"])
    recipe = result.pop("recipe", None)
    if recipe:  # the run's proof states kept for answering audits of this PR
        keep_run(ledger, work_dir(ledger), result["id"], recipe, None)
    remember(ledger, result["id"], result.pop("pointer"), result.pop("declared"))
    return {**result, "error_feedback": ""}
