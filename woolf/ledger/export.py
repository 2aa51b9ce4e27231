"""`woolf export`: a version taken out of the ledger as a model others load.

Usage:
    export_version(ledger, 3, Path("my-model-v3"))                         # checkpoint's dtype, 5 GB shards
    export_version(ledger, 3, Path("out"), dtype="float32", max_shard_size="200MB")

For a transformers ledger the directory is what ``save_pretrained`` writes: config.json,
the tokenizer files, generation_config.json and the weights (``model.safetensors``, or
shards and ``model.safetensors.index.json`` above ``max_shard_size``), so that
``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``
load it offline. For any other workload it is ``model.safetensors`` and a README.txt
saying what it is. The weights come from the version's object after its sha256 is checked
against the version's record (rebuilt if `woolf gc` removed it, and checked the same), and
are cast tensor by tensor, one shard in memory at a time. DIR must be new or empty; the
files are written beside it and moved in at the end, so a failure leaves nothing.

Rounding loses updates: a bf16 checkpoint's ledger keeps float32 masters, and a fine-tuning update below
half a bf16 ulp vanishes when the masters are cast back (after three small merges a bf16 export equalled
genesis in 97% of its elements). So the export measures, before writing a narrower dtype than the
masters, the share of the elements the ledger changed since version 0 that the narrower dtype still
changes (``kept_share``); by default it writes the checkpoint's dtype only when that keeps at least
``KEEP`` of them, and float32 otherwise, and the result says which and why (``precision``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from woolf.errors import UsageError
from woolf.storage.files import make_dir
from woolf.storage.shards import parse_size, write_sharded

_SPEC_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}
DEFAULT_SHARD = "5GB"  # save_pretrained's default
# the share of changed elements a default export in the checkpoint's dtype must keep: below it most of
# what the group trained would not reach the exported model, and float32 is written instead
KEEP = 0.9


def kept_share(version_path: Path, genesis_path: Path, dtype: str) -> dict:
    """Of the floating elements that differ between the version's weights and version 0's, how many
    still differ once both are cast to ``dtype``: ``{"dtype", "changed", "kept", "share"}`` (share None
    when nothing changed). One tensor of each file in memory at a time."""
    import torch  # deferred: torch
    from safetensors import safe_open  # deferred: safetensors

    target = getattr(torch, dtype)
    changed = kept = 0
    with safe_open(str(version_path), framework="pt") as now, safe_open(str(genesis_path), framework="pt") as then:
        for name in now.keys():  # noqa: SIM118 (safe_open has no iterator)
            a, b = now.get_tensor(name), then.get_tensor(name)
            if not a.is_floating_point() or a.shape != b.shape:
                continue
            moved = a != b
            changed += int(moved.sum())
            kept += int((moved & (a.to(target) != b.to(target))).sum())
    return {"dtype": dtype, "changed": changed, "kept": kept, "share": kept / changed if changed else None}


def _narrower(want: str | None, stored: set[str]) -> bool:
    """Whether writing ``want`` rounds weights stored in the ``stored`` floating dtypes."""
    return want is not None and any(DTYPES.get(want, 8) < DTYPES.get(d, 0) for d in stored)


def _choose_dtype(ledger, number: int, source: Path, asked: str | None, default: str | None,
                  stored: set[str]) -> tuple[str | None, dict | None]:
    """(the dtype to write, what rounding to it keeps of the ledger's changes, or None when nothing is
    rounded or nothing changed). ``asked`` (--dtype) is written as asked; the ``default`` (the checkpoint's
    dtype) only when it keeps at least KEEP of the changed elements, else the masters' dtype."""
    want = asked or default
    if number == 0 or not _narrower(want, stored):
        return want, None
    measured = kept_share(source, ledger.weights_path(ledger.show(0)), want)
    if measured["share"] is None:
        return want, None
    if asked is None and measured["share"] < KEEP:
        return max(stored, key=lambda d: DTYPES.get(d, 0)), {**measured, "chose": "masters"}
    return want, {**measured, "chose": "asked" if asked else "checkpoint"}


def _target(out: Path) -> Path:
    out = Path(out)
    if out.is_symlink():  # rmdir/rename on a link ended in a traceback; the link's target is not ours
        raise UsageError(f"{out} is a symbolic link; woolf export writes into a new or empty directory only",
                         hint="give the directory's real path, or remove the link")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is a file", hint="export into a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty; woolf export writes into a new or empty directory only",
                         hint="choose another directory, or remove what is in it")
    return out


def _follow_umask(tmp: Path) -> None:
    """The directory and its files as the user's umask makes them (mkdtemp's are private): the
    modes save_pretrained's directory gets."""
    mask = os.umask(0)
    os.umask(mask)
    for p in tmp.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)
    tmp.chmod(0o777 & ~mask)


def export_version(ledger, number: int, out: Path, dtype: str | None = None,
                   max_shard_size: str | int = DEFAULT_SHARD) -> dict:
    """Write version ``number`` into ``out``; what was written (files, dtype, sha256, ...)."""
    out = _target(out)
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}", hint=f"use one of {', '.join(DTYPES)}")
    limit = parse_size(max_shard_size)
    version = ledger.show(number)
    source = ledger.weights_path(version)  # sha256 checked against the version's record
    cfg = ledger.config
    hf = cfg.workload.name == "transformers"
    wl = ledger.workload() if hf else None
    from woolf.storage.weights import TRUSTED_LIMITS, read_spec  # deferred: loads numpy

    spec = read_spec(source, TRUSTED_LIMITS, f"version {number}")
    names = sorted(spec)
    stored = {_SPEC_DTYPES[d] for d, _ in spec.values() if d in _SPEC_DTYPES}
    want, precision = _choose_dtype(ledger, number, source, dtype, wl.checkpoint_dtype if hf else None, stored)
    cast = None
    if want is not None:
        import torch  # deferred: torch

        target = getattr(torch, want)

        def cast(t):
            return t.to(target) if t.is_floating_point() else t

    make_dir(out.parent, "DIRECTORY")
    try:
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.export-"))
    except OSError as exc:
        raise UsageError(f"cannot write into {out.parent}: {exc.strerror}",
                         hint="export somewhere you can write") from None
    try:
        files = write_sharded(source, names, tmp, limit, cast=cast, dtype_bytes=DTYPES.get(want))
        if hf:
            from woolf.workloads.hf.export import export_files  # deferred: loads transformers

            for name, data in export_files(wl, want).items():
                (tmp / name).parent.mkdir(exist_ok=True)  # additional_chat_templates/NAME.jinja
                (tmp / name).write_bytes(data)
                files.append(name)
        else:
            (tmp / "README.txt").write_text(
                f"Version {number} of the ledger {cfg.name!r} (workload {cfg.workload.name}), exported by woolf.\n"
                f"model.safetensors holds its weights{f' cast to {want}' if want else ''}; load them with "
                "safetensors.torch.load_file and the workload's own model code (woolf/workloads/).\n"
                f"The ledger's record: version commit {version.commit}, weights sha256 {version.weights_sha256}.\n")
            files.append("README.txt")
        record = {"version": number, "commit": version.commit, "weights_sha256": version.weights_sha256,
                  "workload": cfg.workload.name, "dtype": want or "as stored", "files": sorted(files)}
        if precision is not None:
            record["precision"] = precision
        (tmp / "woolf-export.json").write_text(json.dumps(record, indent=2) + "\n")
        _follow_umask(tmp)
        if out.exists():
            out.rmdir()  # empty, checked above
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {**record, "path": str(out)}
