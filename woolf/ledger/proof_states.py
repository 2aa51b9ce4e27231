"""The state files a proof's answer serves: written and uploaded by a participant, fetched and checked by a validator.

Usage:
    pin = upload_state(ledger, state, {"segment": "3", "step": "12", "fingerprints": "ab..,cd.."}, tmp_dir)
    state, meta = fetch_state(ledger, pin, bound=state_bound(model_spec, ranks=1), label="segment 3")
    why = fits_link(state, link_digest)          # None when the state digests to the link

A state file is safetensors: the training state's tensors as woolf/workloads/proof.py names them
(``params/*``, ``opt/<key>/*``, ``data``, ``rng/r<rank>/*``; ``residual/*`` for the final segment of a
top-k PR), and string metadata (the segment, its first step, its steps' fingerprints). A served file
is attacker-written: its size is bounded by what the model's trainable tensors, their two moments and
a few generators can take before anything is downloaded, its header checked before anything is read,
its sha256 checked against the answer's pin, and its tensors' digest against the committed link.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from pathlib import Path

from woolf.errors import IntegrityError, InvalidWeightsError, StorageError
from woolf.protocol.challenge import StatePin
from woolf.protocol.proof import COMPONENTS, state_digest
from woolf.storage.dvcstore import REMOTE_NAME
from woolf.storage.files import hashes_of_file
from woolf.storage.header import header
from woolf.storage.pointer import Pointer
from woolf.storage.weights import load_checked, save_atomic

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
GENERATOR_BYTES = 64 * 1024  # a CPU or CUDA generator's state is 5-16 KB; room per rank
NAME = "proof-state.safetensors"


class BadState(Exception):  # noqa: N818 - the one-line reason a served state cannot be used
    """A served state file that is unusable (missing, oversized, malformed, not its link)."""


def state_bound(model_spec: dict, ranks: int = 1, extra: dict | None = None) -> tuple[int, int]:
    """(most bytes, most tensors) of a served state for a model of ``model_spec``: its tensors, two moments
    each and a step count (in float32: trainable state is never wider), generators of every rank, the
    residual's tensors again (top-k) and ``extra`` (LoRA adapters' spec) when given."""
    spec = {**model_spec, **(extra or {})}
    numel = sum(math.prod(shape) for _, shape in spec.values())
    data = 8 * 4 * numel + 16 * len(spec) + (ranks + 1) * 2 * GENERATOR_BYTES
    return 8 + (4 << 20) + data, 5 * len(spec) + 4 * ranks + 8


def _limits(ledger, bound: tuple[int, int]):
    return dataclasses.replace(ledger.config.limits, max_delta_bytes=bound[0], max_tensors=bound[1],
                               max_header_bytes=4 << 20)


def write_state(state: dict, meta: dict[str, str], out: Path) -> StatePin:
    """Write ``state`` with ``meta`` to ``out`` (hashed while written); its pin."""
    md5, sha = save_atomic(state, out, metadata={k: str(v) for k, v in meta.items()}, durable=False, hashed=True)
    return StatePin(md5, out.stat().st_size, sha)


def upload_state(ledger, path: Path, pin: StatePin, remote: str | None = None) -> StatePin:
    """Put the written state file into the ledger's storage (it is copied, the file stays)."""
    sent = path.with_name(f"{path.name}.{pin.sha256[:12]}.outgoing")
    shutil.copyfile(path, sent)  # put() consumes its file
    ledger.store.put(sent, NAME, md5=pin.md5, sha256=pin.sha256, remote=remote or REMOTE_NAME)
    return pin


def fetch_state(ledger, pin: StatePin, bound: tuple[int, int], label: str, trusted: bool = False):
    """(state tensors, metadata) of a served state: fetched by md5 within ``bound``, sha256 checked,
    header checked, loaded. BadState with one line when any of that fails; StorageError when storage
    cannot be reached now (try again later)."""
    if pin.size > bound[0]:
        raise BadState(f"{label}'s state file declares {pin.size} bytes, over the {bound[0]} a state of this "
                       "model can take")
    try:
        path = ledger.store.fetch_object(Pointer(pin.md5, pin.size, NAME), max_bytes=bound[0])
    except IntegrityError as exc:
        raise BadState(f"{label}'s state file is not the one named ({exc.message[:160]})") from None
    except StorageError:
        raise
    if not trusted and hashes_of_file(Path(path))[1] != pin.sha256:
        raise BadState(f"{label}'s state file does not hash to the sha256 its answer names")
    limits = _limits(ledger, bound)
    try:
        raw = header(Path(path), limits, label)[3]
        meta = json.loads(raw[8:].decode()).get("__metadata__") or {}
        state = load_checked(Path(path), limits, label=f"{label}'s state", finite=False)
    except (InvalidWeightsError, ValueError, UnicodeDecodeError) as exc:
        raise BadState(f"{label}'s state file is malformed ({getattr(exc, 'message', str(exc))[:160]})") from None
    return state, meta


def fetch_blob(ledger, pin: StatePin, most: int, label: str) -> bytes:
    """A served blob's bytes (a private PR's sealed samples): fetched by md5 within ``most`` bytes, sha256 checked."""
    if pin.size > most:
        raise BadState(f"{label} declare {pin.size} bytes, over the {most} they can take")
    try:
        path = ledger.store.fetch_object(Pointer(pin.md5, pin.size, NAME), max_bytes=most)
    except IntegrityError as exc:
        raise BadState(f"{label} are not the ones named ({exc.message[:160]})") from None
    data = Path(path).read_bytes()
    if hashlib.sha256(data).hexdigest() != pin.sha256:
        raise BadState(f"{label} do not hash to the sha256 their answer names")
    return data


def digest_of(state: dict) -> tuple[str, dict[str, str]]:
    """(S, component digests) of a state's four link components."""
    from woolf.core.chain import digests  # deferred: torch

    comps = digests(state, COMPONENTS)
    return state_digest(comps), comps


def fits_link(state: dict, link: str, label: str) -> None:
    """BadState unless ``state`` digests to the committed ``link``."""
    if digest_of(state)[0] != link:
        raise BadState(f"{label}'s state does not digest to its link in the chain")
