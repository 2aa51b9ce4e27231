"""`woolf demo --lora R`: the participants contribute LoRA adapters of rank R (no torch loaded here).

Usage:
    spec = demo_lora("4")                 # "r=4,alpha=8"; also "r=8,alpha=8,targets=qkv+proj"; "off"/None: dense
    settings = lora_settings(spec, {})    # the demo ledger's keys: workload.params.lora, delta.accept += lora
    facts = lora_facts(snapshot.prs)      # {"lora_prs": merged LoRA PRs, "lora_bytes": median factor file, ...}

The participants train with peft on the charlm workload (woolf/workloads/lora.py) through the
same `woolf train` / `woolf submit` path as `--lora` (woolf/participant/lora.py): each PR carries the
factor pairs, and validators expand and merge them exactly like any delta. A bad value is one line.
"""

from __future__ import annotations

import json
import statistics

from woolf.errors import UsageError
from woolf.protocol.config import tomllib
from woolf.protocol.lora_spec import LORA_PARAM, parse_lora
from woolf.storage import kinds

ACCEPT = list(kinds.names())  # every kind: the demo's validators take LoRA PRs beside dense and top-k ones


def demo_lora(text: str | None) -> str | None:
    """The LoRA spec text for ``--lora TEXT`` (a bare rank R means r=R), or None for dense contributions."""
    if text is None:
        return None
    text = text.strip()
    if not text:  # `--lora ''` would silently run dense contributions
        raise UsageError("--lora '': an empty LoRA spec", hint="e.g. --lora 4 (the rank), or leave --lora out")
    try:
        spec = parse_lora(f"r={text}" if text.isdigit() else text)
    except ValueError as exc:
        raise UsageError(f"--lora {text}: {exc}", hint="e.g. --lora 4 (the rank), or --lora r=16,alpha=16") from None
    return spec.text() if spec else None


def lora_settings(spec: str | None, settings: dict[str, str]) -> dict[str, str]:
    """The demo ledger's keys for LoRA contributions (a --set of the same key wins)."""
    if spec is None:
        return {}
    added = {f"workload.params.{LORA_PARAM}": json.dumps(spec)}
    if "delta.accept" not in settings:
        added["delta.accept"] = json.dumps(ACCEPT)
    elif not _accepts_lora(settings["delta.accept"]):
        raise UsageError(f"--lora with --set delta.accept={settings['delta.accept']}: the ledger would refuse "
                         "every LoRA PR", hint="add lora to delta.accept, or drop --lora")
    return added


def _accepts_lora(text: str) -> bool:
    """``--set delta.accept=TEXT`` lists lora (TEXT that is no TOML list is the config check's to refuse)."""
    try:
        accept = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return True
    return not isinstance(accept, list) or kinds.LORA.accepted_by(accept)


def lora_facts(prs) -> dict:
    """Merged PRs by delta kind, and the median size of a LoRA PR's factor file (None: none submitted)."""
    merged: dict[str, int] = {}
    sizes = []
    for p in prs:
        delta = (p.submission or {}).get("delta") or {}
        kind = delta.get("kind", "dense")
        if p.state == "merged":
            merged[kind] = merged.get(kind, 0) + 1
        if kinds.LORA.matches(delta) and isinstance(delta.get("size"), int):
            sizes.append(delta["size"])
    return {"merged_kinds": dict(sorted(merged.items())),
            "lora_bytes": int(statistics.median(sizes)) if sizes else None}


def contribution_words(spec: str | None, targets: str) -> str:
    """What each contribution is, in words, for the summary and the report."""
    if spec is None:
        return "dense float32 deltas (every parameter trained)"
    return (f"LoRA adapters {spec} on {targets} (peft; the rest frozen), sent as factor pairs and merged "
            f"as their exact product")
