"""A PR's proof of training: a chain of state commitments every k steps, ending at its delta.

Usage:
    k = effective_every(0, steps=60)                     # a link every k steps (0: auto), links bounded
    at = link_steps(60, k)                               # [0, 4, 8, ..., 60]: the steps the links name
    s = state_digest({"params": h1, "opt": h2, "data": h3, "rng": h4})
    f = fingerprint(loss, grad_norm)                     # one step's 16 hex: the two float32s' bits
    proof = make_proof(every=k, device_class=c, start=..., links=[[s0, ""], [s1, f1], ...], end=...)
    why = check_proof(proof, steps=60, delta_sha256=sha, base_version=3)   # None, or what is wrong
    chosen = draw_segments(material, segments=15, extra=1)   # the final segment and `extra` others

The proof lives in the recipe (``recipe["proof"]``, docs/protocol.md#proof-of-training), inside the
signed submission.json. ``links[i] = [S_i, F_i]``: ``S_i`` the digest of the training state after step
``at[i]`` (trainable weights, optimizer state, data position, random generators: each a component
digest, woolf/core/chain.py), ``F_i`` the digest of the per-step fingerprints of the segment that
ends there (``F_0`` is ""). ``start`` names the state's components at step 0 (so that a validator
checks the start against the ledger's version and the contributor's previous PR without asking for
it), ``end`` the optimizer's and the compression residual's end and the delta's sha256: the chain's
head ``H(link..., end)`` ends at the delta, and a proof whose ``end.delta`` is not the PR's delta
is refused. Standard library only (protocol/ is L2).
"""

from __future__ import annotations

import hashlib
import math
import re
import struct

SCHEMA = 1
MAX_LINKS = 128  # links one proof may hold (a longer run raises k): ~17 KB of the 64 KiB submission.json
AUTO_SEGMENTS = 16  # segments of a run when proof.every is 0 (auto)
COMPONENTS = ("params", "opt", "data", "rng")  # what a link's state digest is made of, in this order
RANK = re.compile(r"^r([0-9]{1,4})$")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_FP = re.compile(r"^[0-9a-f]{16}\Z")
# the device class a replay must share to be compared bit for bit (docs/protocol.md#device-class);
# "threads" is not among them: a validator replays with the declared thread count
CLASS_KEYS = ("device", "torch", "capability", "gpu", "autocast", "deterministic")
MAX_CLASS_TEXT = 200
COMPONENT_PREFIX = b"woolf-component\0"  # woolf/core/chain.py component_digest starts every digest so
EMPTY = hashlib.sha256(COMPONENT_PREFIX).hexdigest()  # the digest of a component with no tensor (a fresh AdamW)


def effective_every(every: int, steps: int) -> int:
    """Steps per link for a run of ``steps``: ``every`` (0: about AUTO_SEGMENTS segments), raised so that
    the run has at most MAX_LINKS links."""
    k = every if every > 0 else math.ceil(steps / AUTO_SEGMENTS)
    return max(1, k, math.ceil(steps / (MAX_LINKS - 1)))


def link_steps(steps: int, every: int) -> list[int]:
    """The step after which each link's state is taken: 0, k, 2k, ..., and ``steps`` itself."""
    at = list(range(0, steps, every))
    return [*at, steps]


def state_digest(components: dict[str, str]) -> str:
    """One state's digest from its components' (name -> hex digest), in name order."""
    h = hashlib.sha256(b"woolf-state\0")
    for name in sorted(components):
        h.update(f"{name}={components[name]};".encode())
    return h.hexdigest()


def fingerprint(loss: float, grad_norm: float) -> str:
    """A step's fingerprint: the float32 bits of its loss and of its gradient norm (16 hex). A replay
    that differs at a step shows it there, so the first differing step is named without bisection."""
    return struct.pack(">ff", loss, grad_norm).hex()


def segment_digest(fingerprints: list[str]) -> str:
    """F_i: the digest of one segment's step fingerprints, in step order."""
    return hashlib.sha256(("woolf-steps\0" + ",".join(fingerprints)).encode()).hexdigest()


def chain_head(links: list, start: dict, end: dict) -> str:
    """The chain's head: link_i = H(link_{i-1}, i, S_i, F_i) from H(start), then H(link_m, end)."""
    h = hashlib.sha256(("woolf-chain\0" + _canon(start)).encode()).hexdigest()
    for i, (s, f) in enumerate(links):
        h = hashlib.sha256(f"{h}:{i}:{s}:{f}".encode()).hexdigest()
    return hashlib.sha256(f"{h}:end:{_canon(end)}".encode()).hexdigest()


def _canon(d: dict) -> str:
    return ";".join(f"{k}={d[k]}" for k in sorted(d))


def make_proof(*, every: int, device_class: dict, start: dict, links: list, end: dict,
               follow: list | None = None, follow_every: int = 0) -> dict:
    """The proof as the recipe carries it (plain JSON), its head computed."""
    proof = {"schema": SCHEMA, "every": every, "class": dict(device_class), "start": dict(start),
             "links": [list(x) for x in links], "follow": [list(x) for x in follow or []],
             "follow_every": follow_every, "end": dict(end)}
    proof["head"] = chain_head(proof["links"], proof["start"], proof["end"])
    return proof


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _hex_or_null(x) -> bool:
    return x is None or (isinstance(x, str) and bool(_HEX64.match(x)))


def _shape(p) -> str | None:
    if not isinstance(p, dict) or p.get("schema") != SCHEMA:
        return f"schema must be {SCHEMA}"
    if not _int(p.get("every")) or p["every"] < 1:
        return "every must be an integer >= 1"
    links = p.get("links")
    if not isinstance(links, list) or not 2 <= len(links) <= MAX_LINKS:
        return f"links must be a list of 2 to {MAX_LINKS} [state, steps] pairs"
    for i, link in enumerate(links):
        if (not isinstance(link, list) or len(link) != 2 or not isinstance(link[0], str)
                or not _HEX64.match(link[0]) or not isinstance(link[1], str)
                or not (_HEX64.match(link[1]) if i else link[1] == "")):
            return f"link {i} must be [64 hex, 64 hex] (the first: [64 hex, \"\"])"
    return _shape_ends(p)


def _shape_ends(p: dict) -> str | None:
    start, end, cls = p.get("start"), p.get("end"), p.get("class")
    if not isinstance(start, dict) or set(start) - {*COMPONENTS, "version", "carried"} \
            or not all(isinstance(start.get(c), str) and _HEX64.match(start[c]) for c in COMPONENTS) \
            or not _int(start.get("version")) or start["version"] < 0:
        return "start must name its version and the digest of each of params, opt, data and rng"
    carried = start.get("carried")
    if carried is not None and (not isinstance(carried, str) or len(carried) > 128):
        return "start.carried must be the id of the PR whose optimizer state it continues, or null"
    if not isinstance(end, dict) or set(end) - {"opt", "residual_in", "residual_out", "delta"} \
            or not all(_hex_or_null(end.get(k)) for k in ("opt", "residual_in", "residual_out")) \
            or not (isinstance(end.get("delta"), str) and _HEX64.match(end["delta"])):
        return "end must name the delta's sha256 and the end's optimizer and residual digests"
    if not isinstance(cls, dict) or len(cls) > 16 or not all(
            isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool)
            and len(str(v)) <= MAX_CLASS_TEXT for k, v in cls.items()):
        return "class must be a small table of strings and integers"
    follow = p.get("follow", [])
    if not isinstance(follow, list) or len(follow) > 4 * MAX_LINKS or not all(
            isinstance(f, list) and len(f) == 2 and _int(f[0]) and _int(f[1]) and f[0] >= 1 and f[1] >= 0
            for f in follow):
        return "follow must be a list of [step, version] pairs"
    if not _int(p.get("follow_every", 0)) or p.get("follow_every", 0) < 0:
        return "follow_every must be an integer >= 0"
    return None if isinstance(p.get("head"), str) and _HEX64.match(p["head"]) else "head must be 64 hex"


def check_proof(proof, *, steps: int, delta_sha256: str, base_version: int) -> str | None:
    """What is wrong with ``proof`` for a PR of ``steps`` declared steps whose delta hashes to ``delta_sha256``
    on ``base_version``; None when nothing is. Costs no weights: the rules a validator checks on every PR."""
    bad = _shape(proof)
    if bad:
        return f"its proof is malformed ({bad})"
    at = link_steps(steps, proof["every"])
    if len(at) != len(proof["links"]):
        return (f"its chain's {len(proof['links'])} links do not cover the {steps} declared steps at one every "
                f"{proof['every']} ({len(at)} links)")
    if proof["every"] < effective_every(1, steps):
        return f"its chain has more links than the {MAX_LINKS} a proof may hold"
    if proof["end"]["delta"] != delta_sha256:
        return "its chain does not end at the delta (end.delta is not the delta's sha256)"
    if chain_head(proof["links"], proof["start"], proof["end"]) != proof["head"]:
        return "its proof's head is not the chain of its links"
    if state_digest({c: proof["start"][c] for c in COMPONENTS}) != proof["links"][0][0]:
        return "its chain's first link is not its declared start"
    follow = proof.get("follow", [])
    if any(s > steps for s, _ in follow) or [s for s, _ in follow] != sorted({s for s, _ in follow}):
        return "its chain's follow points are not increasing steps within the run"
    versions = [proof["start"]["version"], *(v for _, v in follow)]
    if versions != sorted(set(versions)) or versions[-1] != base_version:
        return (f"its chain's versions (from {versions[0]}, followed to {versions[1:]}) do not rise to the PR's "
                f"base version {base_version}")
    return None


def segment_bounds(proof: dict, steps: int, i: int) -> tuple[int, int]:
    """(first, last) step of segment ``i`` (0-based): it replays steps first+1 .. last."""
    at = link_steps(steps, proof["every"])
    return at[i], at[i + 1]


def draw_segments(material: bytes, segments: int, extra: int) -> list[int]:
    """The segments a validator audits: always the last (it binds the delta), and ``extra`` others chosen
    by ``material`` (the same unpredictable draw as the PR's: the hub's receipt, the id, a validators'
    secret), sorted. Each other segment is ranked by sha256(material, i): no library's random stream."""
    last = segments - 1
    ranked = sorted(range(last), key=lambda i: hashlib.sha256(material + b"\0seg\0" + str(i).encode()).digest())
    return sorted([*ranked[:max(0, extra)], last])


def same_class(declared: dict, own: dict) -> bool:
    """Whether a replay on ``own`` device class may be compared bit for bit with ``declared``."""
    return all(str(declared.get(k, "")) == str(own.get(k, "")) for k in CLASS_KEYS)
