"""DVC pointer files (`.dvc`): parsed under a strict schema, rendered as DVC writes them.

Usage:
    ptr = Pointer.parse(blob, label="ledger/weights/model.safetensors.dvc")
    ptr.md5, ptr.size; ptr.render()

A pointer DVC writes is about 100 bytes; anything over MAX_BYTES is refused
before the YAML parser sees it (a 4 MB hostile pointer must cost nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from woolf.errors import IntegrityError

MAX_BYTES = 4096
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Pointer:
    md5: str
    size: int
    path: str  # file name relative to the .dvc file

    @classmethod
    def parse(cls, data: bytes, label: str = "pointer") -> Pointer:
        """Strict schema: one output with md5, size, hash: md5 and a plain file name."""
        if len(data) > MAX_BYTES:
            raise IntegrityError(f"{label}: not a valid DVC pointer: {len(data)} bytes, over {MAX_BYTES}")
        try:
            doc = yaml.load(data.decode("utf-8"), Loader=_Loader)  # noqa: S506 - a safe loader
            outs = doc["outs"]
            if set(doc) != {"outs"} or len(outs) != 1:
                raise ValueError("expected exactly one output")
            out = outs[0]
            if set(out) - {"md5", "size", "hash", "path"} or out.get("hash") != "md5":
                raise ValueError(f"unexpected fields {sorted(out)}")
            md5, size, path = out["md5"], out["size"], out["path"]
            if not (isinstance(md5, str) and len(md5) == 32 and all(c in "0123456789abcdef" for c in md5)):
                raise ValueError("md5 is not 32 hex digits")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise ValueError("size is not a non-negative integer")
            if not isinstance(path, str) or "/" in path or path in ("", ".", ".."):
                raise ValueError("path must be a plain file name")
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, yaml.YAMLError) as exc:
            raise IntegrityError(f"{label}: not a valid DVC pointer: {exc}") from None
        return cls(md5, size, path)

    def render(self) -> bytes:
        return (f"outs:\n- md5: {self.md5}\n  size: {self.size}\n  hash: md5\n"
                f"  path: {self.path}\n").encode()
