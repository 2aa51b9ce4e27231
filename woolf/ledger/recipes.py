"""A merged version's recipe and its re-training record, for `woolf show` (issue 34).

Usage:
    extra = version_recipe(ledger, v)     # {"recipe": {...} | None, "retrain": {...} | None}

The recipe is the PR's (submission.json in the version's second parent, woolf/protocol/recipe.py); the
re-training record is the version's own Woolf-Retrain trailer (woolf/validator/retrain.py). Both are read
as untrusted data: a missing or malformed one is None.
"""

from __future__ import annotations

from woolf.git.repo import BlobTooLargeError
from woolf.protocol import layout
from woolf.protocol.layout import META_MAX_BYTES, META_MAX_DEPTH
from woolf.protocol.safejson import loads_untrusted
from woolf.protocol.trailers import json_field, parse_message


def version_recipe(ledger, v) -> dict:
    out: dict = {"recipe": None, "retrain": None}
    if not v.submission or len(v.parents) != 2:
        return out
    try:
        raw = ledger.git.show_bytes(f"{v.parents[1]}:{layout.submission_paths(v.submission)[2]}",
                                    max_bytes=META_MAX_BYTES)
        meta = loads_untrusted(raw, META_MAX_BYTES, META_MAX_DEPTH) if raw is not None else None
    except (BlobTooLargeError, ValueError):
        meta = None
    if isinstance(meta, dict) and isinstance(meta.get("recipe"), dict):
        out["recipe"] = meta["recipe"]
    retrain = json_field(parse_message(ledger.git.message(v.commit))[1], "Woolf-Retrain")
    out["retrain"] = retrain if isinstance(retrain, dict) else None
    return out
