"""Sharded safetensors checkpoints as `save_pretrained` writes them: checked in, written out.

Usage:
    spec, files = check_sharded(Path("my-model"), limits)   # index.json checked against the shards
    size = parse_size("5GB")                                  # bytes (GB = 10^9, GiB = 2^30)
    written = write_sharded(source, names, Path("out"), max_shard_bytes=size, cast=to_bf16)

A sharded directory holds ``model.safetensors.index.json`` (``{"weight_map": {tensor: file}}``)
and the files it names. Every file and name is checked before anything is loaded: a shard
outside the directory, one named but missing, a ``*.safetensors`` file the index does not
name, a tensor in two shards or in a shard the index does not say, and floating tensors of
more than one dtype are each a one-line refusal naming the file. ``write_sharded`` streams:
one shard's tensors in memory at a time, read from a safetensors file with ``safe_open``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from woolf.errors import UsageError
from woolf.protocol.config import LimitsConfig
from woolf.storage.header import Spec, read_spec

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
FLOATS = ("F64", "F32", "F16", "BF16")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def parse_size(text: str | int) -> int:
    """``"5GB"``, ``"200MiB"``, ``"1000000"`` -> bytes (> 0)."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m or m.group(2).upper() not in _UNITS:
            raise UsageError(f"--max-shard-size {text!r}: not a size", hint="e.g. 5GB, 500MB, 2GiB or bytes")
        value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise UsageError(f"--max-shard-size {text!r}: must be more than 0 bytes")
    return value


def _index(path: Path) -> dict[str, str]:
    where = path / INDEX
    if where.stat().st_size > 64 << 20:
        raise UsageError(f"{where}: over 64 MiB; not an index of shards")
    try:
        raw = json.loads(where.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: not valid JSON ({exc})") from None
    wmap = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(wmap, dict) or not wmap or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in wmap.items()):
        raise UsageError(f"{where}: no weight_map of tensor names to shard files",
                         hint="write the model with save_pretrained, which writes the index")
    return wmap


def check_sharded(path: Path, limits: LimitsConfig) -> tuple[Spec, list[str]]:
    """(the model's spec over all shards, the shard file names): or a refusal naming the file."""
    path = Path(path)
    where = path / INDEX
    if (path / SINGLE).exists():
        raise UsageError(f"{path} holds both {SINGLE} and {INDEX}; which is the model?",
                         hint="remove the one save_pretrained did not write last")
    wmap = _index(path)
    root = path.resolve()
    shards = sorted(set(wmap.values()))
    for name in shards:
        target = (path / name)
        if "/" in name or "\\" in name or name in ("", ".", "..") or target.resolve().parent != root:
            raise UsageError(f"{where}: shard {name[:120]!r} is outside {path}",
                             hint="an index names files in its own directory only")
        if not target.is_file():
            raise UsageError(f"{where} names {name}, which is not in {path}",
                             hint="copy every shard save_pretrained wrote, or write the model again")
    extra = sorted(p.name for p in path.glob("*.safetensors") if p.name not in set(shards))
    if extra:
        raise UsageError(f"{path / extra[0]} is a shard that {INDEX} does not name",
                         hint="remove it, or write the model again with save_pretrained")
    spec: Spec = {}
    owner: dict[str, str] = {}
    for name in shards:
        for tensor, entry in read_spec(path / name, limits, str(path / name)).items():
            if tensor in owner:
                raise UsageError(f"{path / name}: tensor {tensor[:120]!r} is also in {owner[tensor]}",
                                 hint="shards must hold disjoint tensors; write the model again")
            if wmap.get(tensor) != name:
                raise UsageError(f"{path / name} holds tensor {tensor[:120]!r}, which {INDEX} "
                                 + ("does not name" if tensor not in wmap else f"puts in {wmap[tensor]}"),
                                 hint="the index and the shards must come from the same save_pretrained")
            owner[tensor], spec[tensor] = name, entry
    missing = sorted(set(wmap) - set(spec))
    if missing:
        raise UsageError(f"{where} names tensor {missing[0][:120]!r} in {wmap[missing[0]]}, which does not hold it",
                         hint="the index and the shards must come from the same save_pretrained")
    floats: dict[str, str] = {}
    for tensor, (dtype, _) in spec.items():
        if dtype in FLOATS:
            floats.setdefault(dtype, owner[tensor])
    if len(floats) > 1:
        first, *rest = sorted(floats)
        raise UsageError(f"{path / floats[rest[0]]} holds {rest[0]} tensors, {path / floats[first]} {first}: "
                         "a model in one floating dtype is needed",
                         hint="save it in one dtype: model.to(torch.float32).save_pretrained(DIR)")
    return spec, shards


def plan_shards(sizes: dict[str, int], max_shard_bytes: int) -> list[list[str]]:
    """Names grouped in order into shards of at most ``max_shard_bytes`` (a bigger tensor alone)."""
    groups: list[list[str]] = [[]]
    used = 0
    for name, size in sizes.items():
        if groups[-1] and used + size > max_shard_bytes:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += size
    return [g for g in groups if g]


def write_sharded(source: Path, names: list[str], out: Path, max_shard_bytes: int, cast=None,
                  dtype_bytes: int | None = None) -> list[str]:
    """The tensors ``names`` of the safetensors file ``source`` written into ``out``: one
    ``model.safetensors``, or shards and their index above ``max_shard_bytes``. ``cast(tensor)``
    converts each one on its way (one shard in memory at a time). The files written."""
    from safetensors import safe_open  # deferred: safetensors
    from safetensors.torch import save_file  # deferred: safetensors, torch

    spec = read_spec(source, LimitsConfig(max_delta_bytes=1 << 50, max_header_bytes=1 << 30,
                                          max_tensors=1 << 24), str(source))
    sizes = {}
    for name in names:
        dtype, shape = spec[name]
        numel = 1
        for d in shape:
            numel *= d
        sizes[name] = numel * (dtype_bytes if dtype_bytes and dtype in FLOATS else _BYTES[dtype])
    groups = plan_shards(sizes, max_shard_bytes)
    files = ([SINGLE] if len(groups) == 1 else
             [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))])
    weight_map = {}
    with safe_open(str(source), framework="pt") as fh:
        for fname, group in zip(files, groups, strict=True):
            tensors = {}
            for name in group:
                t = fh.get_tensor(name)
                tensors[name] = (cast(t) if cast else t).contiguous()
                weight_map[name] = fname
            save_file(tensors, str(out / fname), metadata={"format": "pt"})
            del tensors
    if len(files) > 1:
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": dict(sorted(weight_map.items()))}
        (out / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        files.append(INDEX)
    return files
