"""Challenges and answers: a validator asks a drawn PR's participant for the states its audit needs.

Usage:
    ref = challenge_ref(sub_id, "v1")                 # refs/woolf/pr/<id>/challenge/v1
    msg = challenge_message(sub_id, "v1", [3, 15], deadline=1765000000, ends=False)
    c, why = parse_challenge(message, sub_id)         # Challenge, or (None, why it is none)
    msg = answer_message(sub_id, challenge_commit, {3: {"md5": .., "size": .., "sha256": ..}})
    a, why = parse_answer(message, sub_id)            # Answer, or (None, why)

A challenge is a commit on the validator's own ref under the PR (its parent the PR's head, or the
ref's previous challenge), trailers Woolf-Challenge ({"segments": [...], "ends": bool}),
Woolf-Submission, Woolf-Validator and Woolf-Deadline (unix seconds, on the hub's clock: the hook
keeps the commit's time within MAX_SKEW of its own). An answer is a commit on
refs/woolf/pr/<id>/answer (chained from the PR's head), trailers Woolf-Answer ({"challenge":
commit, "states": {segment: {md5, size, sha256}}}) and Woolf-Submission: each state a
safetensors file in the ledger's storage (woolf/ledger/proof_states.py). Everything here is read
as attacker-written. Standard library only (protocol/ is L2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from woolf.protocol import layout
from woolf.protocol.trailers import format_message, int_field, json_field, parse_message

CHALLENGE_MAX_BYTES = 4096  # a challenge commit, checked before it is read
ANSWER_MAX_BYTES = 16 * 1024  # an answer commit
MAX_CHALLENGES = 8  # commits on one validator's challenge ref
MAX_ANSWERS = 32  # commits on a PR's answer ref: a keyless PR's answers may come from anyone
MAX_SEGMENTS = 127
_HEX32 = re.compile(r"^[0-9a-f]{32}\Z")
_HEX40 = re.compile(r"^[0-9a-f]{40}\Z")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")


def challenge_ref(sub_id: str, validator: str) -> str:
    return f"{layout.PR_PREFIX}/{sub_id}/challenge/{validator}"


def answer_ref(sub_id: str) -> str:
    return f"{layout.PR_PREFIX}/{sub_id}/answer"


@dataclass(frozen=True)
class Challenge:
    sub_id: str
    validator: str
    segments: tuple[int, ...]
    deadline: int  # unix seconds, the hub's clock
    ends: bool  # the segments' end states too (a validator of another device class)
    commit: str = ""
    key: str | None = None  # the validator's X25519 public key (hex): a private-data PR's samples are sealed to it


@dataclass(frozen=True)
class StatePin:
    md5: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Answer:
    sub_id: str
    challenge: str  # the challenge commit it answers
    states: dict  # {segment: StatePin} (start states); "end:<segment>" when ends were asked, "samples:<segment>"
    commit: str = ""


def challenge_message(sub_id: str, validator: str, segments: list[int], deadline: int, ends: bool,
                      key: str | None = None) -> str:
    body = {"segments": sorted(segments), "ends": bool(ends), **({"key": key} if key else {})}
    return format_message(f"woolf: challenge {sub_id}", {
        "Woolf-Challenge": body, "Woolf-Submission": sub_id, "Woolf-Validator": validator,
        "Woolf-Deadline": int(deadline)})


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_challenge(message: str, sub_id: str, commit: str = "") -> tuple[Challenge | None, str | None]:
    if len(message.encode()) > CHALLENGE_MAX_BYTES:
        return None, f"a challenge is at most {CHALLENGE_MAX_BYTES} bytes"
    _, f = parse_message(message)
    body, name, deadline = json_field(f, "Woolf-Challenge"), f.get("Woolf-Validator") or "", \
        int_field(f, "Woolf-Deadline")
    if f.get("Woolf-Submission") != sub_id:
        return None, "a challenge names its PR in Woolf-Submission"
    if not layout.CONTRIBUTOR.match(name):
        return None, "a challenge names its validator (one plain name) in Woolf-Validator"
    if not isinstance(body, dict) or set(body) - {"key"} != {"segments", "ends"} or not isinstance(body["ends"], bool):
        return None, 'Woolf-Challenge must be {"segments": [...], "ends": true|false[, "key": hex]}'
    if "key" in body and not (isinstance(body["key"], str) and _HEX64.match(body["key"])):
        return None, "a challenge's key is an X25519 public key (64 hex)"
    segs = body["segments"]
    if not isinstance(segs, list) or not 1 <= len(segs) <= MAX_SEGMENTS \
            or not all(_int(s) and 0 <= s < 1 << 16 for s in segs) or segs != sorted(set(segs)):
        return None, f"a challenge asks for 1 to {MAX_SEGMENTS} distinct segments, increasing"
    if deadline is None or deadline <= 0:
        return None, "a challenge carries its deadline (Woolf-Deadline, unix seconds)"
    return Challenge(sub_id, name, tuple(segs), deadline, body["ends"], commit, body.get("key")), None


def answer_message(sub_id: str, challenge: str, states: dict) -> str:
    return format_message(f"woolf: answer {sub_id}", {
        "Woolf-Answer": {"challenge": challenge,
                         "states": {str(k): {"md5": p.md5, "size": p.size, "sha256": p.sha256}
                                    if isinstance(p, StatePin) else dict(p) for k, p in states.items()}},
        "Woolf-Submission": sub_id})


def _pin(x) -> StatePin | None:
    if not isinstance(x, dict) or set(x) != {"md5", "size", "sha256"}:
        return None
    if not (isinstance(x["md5"], str) and _HEX32.match(x["md5"]) and _int(x["size"]) and x["size"] > 0
            and isinstance(x["sha256"], str) and _HEX64.match(x["sha256"])):
        return None
    return StatePin(x["md5"], x["size"], x["sha256"])


def _key(k: str):
    """A state's key: a segment number (its start state), "end:<segment>" (its end state) or
    "samples:<segment>" (a private-data PR's batches of that segment, sealed to the validator)."""
    kind, _, digits = k.rpartition(":")
    if kind not in ("", "end", "samples") or not digits.isdigit() or len(digits) > 5:
        return None
    return f"{kind}:{int(digits)}" if kind else int(digits)


def parse_answer(message: str, sub_id: str, commit: str = "") -> tuple[Answer | None, str | None]:
    if len(message.encode()) > ANSWER_MAX_BYTES:
        return None, f"an answer is at most {ANSWER_MAX_BYTES} bytes"
    _, f = parse_message(message)
    if f.get("Woolf-Submission") != sub_id:
        return None, "an answer names its PR in Woolf-Submission"
    body = json_field(f, "Woolf-Answer")
    if not isinstance(body, dict) or set(body) != {"challenge", "states"}:
        return None, 'Woolf-Answer must be {"challenge": commit, "states": {...}}'
    if not isinstance(body["challenge"], str) or not _HEX40.match(body["challenge"]):
        return None, "an answer names the challenge commit it answers"
    states = body["states"]
    if not isinstance(states, dict) or not 1 <= len(states) <= 3 * MAX_SEGMENTS:
        return None, "an answer carries the states asked for"
    out = {}
    for k, v in states.items():
        key, pin = _key(k) if isinstance(k, str) else None, _pin(v)
        if key is None or pin is None:
            return None, f"state {str(k)[:20]!r} is not a segment with its md5, size and sha256"
        out[key] = pin
    return Answer(sub_id, body["challenge"], out, commit), None
