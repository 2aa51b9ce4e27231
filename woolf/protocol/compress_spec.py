"""What a compressed delta declares: its kind and (chunk, k, bits), parsed and checked without torch.

Usage:
    spec = parse_spec("topk:0.02,bits:2")           # CompressSpec(chunk=256, k=5, bits=2); None for "dense"
    compress_kind(spec)                             # the delta kind that spec sends: "topk" ("dense" for None)
    spec_from_declared(submission["delta"])         # ValueError unless exactly the kind's fields

The config check imports this, and the config is parsed inside the hub's hook,
which runs without site-packages (no torch): keep it standard-library only.
The arithmetic is in woolf/core/compress.py. The kinds' names are data here (the config check's
allowed ``delta.accept`` values, the ``delta.compress`` syntax); what each kind does is
woolf/storage/kinds/'s, which must register exactly the names in KINDS.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("dense", "topk", "lora")  # lora: factor pairs (woolf/storage/kinds/lora.py), not a compression
UNCOMPRESSED = "dense"  # the delta.compress value that sends the delta as it is (no spec)
DENSITY = "topk"  # the delta.compress field of the fraction kept, and the kind such a spec sends
BITS = (2, 4, 8)
MIN_CHUNK, MAX_CHUNK = 16, 32768
DEFAULT_CHUNK = 256


@dataclass(frozen=True)
class CompressSpec:
    chunk: int = DEFAULT_CHUNK
    k: int = 5
    bits: int = 2

    def __post_init__(self):
        for name in ("chunk", "k", "bits"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"{name} must be an integer, got {v!r}")
        if not MIN_CHUNK <= self.chunk <= MAX_CHUNK:
            raise ValueError(f"chunk {self.chunk} is outside [{MIN_CHUNK}, {MAX_CHUNK}]")
        if not 1 <= self.k <= self.chunk:
            raise ValueError(f"k {self.k} is outside [1, chunk={self.chunk}]")
        if self.bits not in BITS:
            raise ValueError(f"bits {self.bits} is not one of {', '.join(map(str, BITS))}")

    @property
    def density(self) -> float:
        return self.k / self.chunk

    def declared(self) -> dict:
        """The fields submission.json's delta carries for this kind."""
        return {"kind": DENSITY, "chunk": self.chunk, "k": self.k, "bits": self.bits}

    def text(self) -> str:
        return f"topk:{self.density:.4g},bits:{self.bits},chunk:{self.chunk}"


def parse_spec(text: str) -> CompressSpec | None:
    """``dense`` -> None; ``topk:D[,bits:B][,chunk:C]`` (D: fraction kept) -> CompressSpec."""
    text = text.strip()
    if text == UNCOMPRESSED:
        return None
    fields: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition(":")
        if not sep or key in fields or key not in (DENSITY, "bits", "chunk"):
            raise ValueError(f"{text!r}: expected 'dense' or 'topk:0.02,bits:2[,chunk:256]'")
        fields[key] = value.strip()
    if DENSITY not in fields:
        raise ValueError(f"{text!r}: expected 'dense' or 'topk:0.02,bits:2[,chunk:256]'")
    try:
        density = float(fields[DENSITY])
        chunk = int(fields.get("chunk", DEFAULT_CHUNK))
        bits = int(fields.get("bits", 2))
    except ValueError:
        raise ValueError(f"{text!r}: topk takes a fraction, bits and chunk integers") from None
    if not 0 < density <= 1:
        raise ValueError(f"{text!r}: topk is the fraction of values kept, in (0, 1]")
    return CompressSpec(chunk, max(1, min(chunk, round(density * chunk))), bits)


def compress_kind(spec: CompressSpec | None) -> str:
    """The delta kind a parsed ``delta.compress`` value sends (the config check matches it with delta.accept)."""
    return UNCOMPRESSED if spec is None else spec.declared()["kind"]


def spec_from_declared(d: dict) -> CompressSpec:
    """The spec a submission's delta declares; ValueError if its fields are not exactly the kind's."""
    if set(d) - {"url", "sha256", "md5", "size"} != {"kind", "chunk", "k", "bits"}:
        raise ValueError("a topk delta declares exactly chunk, k and bits")
    return CompressSpec(d["chunk"], d["k"], d["bits"])
