"""Every `Woolf-*` trailer name, in one registry: what it holds and which commits carry it.

Usage:
    from woolf.protocol.trailer_names import TRAILERS, known
    TRAILERS["Woolf-Staleness"].kind           # "int"
    known("Woolf-Staleness")                   # True; format_message refuses a name not listed here

Carriers: version (genesis, merge and change commits on main), verdict (refs/woolf/pr/<id>/verdict),
vote (refs/woolf/pr/<id>/votes/<name>), task (refs/woolf/task/<id>), submission (a PR's head),
receipt (refs/woolf/pr/receipts), challenge (refs/woolf/pr/<id>/challenge/<name>), answer
(refs/woolf/pr/<id>/answer).
docs/protocol.md describes each in full.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trailer:
    kind: str  # int | float | json | text | sha256
    carriers: tuple[str, ...]
    meaning: str


def _t(kind: str, carriers: str, meaning: str) -> Trailer:
    return Trailer(kind, tuple(carriers.split()), meaning)


TRAILERS: dict[str, Trailer] = {
    "Woolf-Version": _t("int", "version", "the version number, consecutive along main's first parents"),
    "Woolf-Weights-Sha256": _t("sha256", "version", "sha256 of the weights file's bytes"),
    "Woolf-State-Sha256": _t("sha256", "version", "sha256 of the merge rule's state file (stateful rules)"),
    "Woolf-Source": _t("text", "version", "where genesis came from"),
    "Woolf-Metrics": _t("json", "version", "genesis's benchmark metrics"),
    "Woolf-Change": _t("text", "version", "a maintainer change: config | signers"),
    "Woolf-Submission": _t("text", "version verdict vote task submission challenge answer", "the submission (PR) id"),
    "Woolf-Contributor": _t("text", "version verdict task submission", "who trained the delta"),
    "Woolf-Base-Version": _t("int", "version verdict task submission", "the version the delta starts from"),
    "Woolf-Base-Commit": _t("text", "task", "the commit of that version"),
    "Woolf-Staleness": _t("int", "version verdict vote", "versions on main after the base, at merge time"),
    "Woolf-Attenuation": _t("float", "version verdict vote", "f(staleness)"),
    "Woolf-Staleness-Function": _t("text", "version", "which staleness function"),
    "Woolf-Alpha": _t("float", "version", "merge.alpha_base"),
    "Woolf-Rule": _t("text", "version", "the merge rule; absent = attenuated"),
    "Woolf-Rule-Params": _t("json", "version", "the stateful rule's parameters"),
    "Woolf-Metrics-Before": _t("json", "version verdict vote", "benchmark metrics of current main"),
    "Woolf-Metrics-After": _t("json", "version verdict vote", "benchmark metrics of the candidate"),
    "Woolf-Metrics-Probe": _t("json", "version", "metrics of the probe a buffered rule judged"),
    "Woolf-Delta-Sha256": _t("sha256", "version verdict submission", "sha256 of the delta file"),
    "Woolf-Delta-Content": _t("sha256", "version verdict", "sha256 of the delta's tensors"),
    "Woolf-Delta-Norm": _t("float", "version verdict", "the delta's norm as merged"),
    "Woolf-Delta-Clip": _t("float", "version", "the factor a clipped delta was scaled by"),
    "Woolf-Reason": _t("text", "version verdict vote task", "the decision in words"),
    "Woolf-Validator": _t("text", "version verdict challenge", "which validator decided (or challenged)"),
    "Woolf-Device": _t("text", "version verdict", "where the validator evaluated"),
    "Woolf-Timings": _t("json", "version verdict vote", "seconds per step of the validation"),
    "Woolf-Scores": _t("json", "version verdict", "loss removed on the assigned and a random shard"),
    "Woolf-Flags": _t("json", "version verdict", "marks on a merged or rejected PR"),
    "Woolf-Benchmark": _t("text", "version verdict", "hidden:<sha256> when the metrics are private"),
    "Woolf-Reverts": _t("int", "version verdict submission", "the version a revert takes back"),
    "Woolf-Votes": _t("json", "version verdict", "the vote commits a quorum decision rests on"),
    "Woolf-Verdict": _t("text", "verdict", "rejected | withdrawn | expired"),
    "Woolf-Closed-By": _t("text", "verdict", "who withdrew the PR"),
    "Woolf-Main": _t("text", "verdict vote", "the main commit the decision was made against"),
    "Woolf-Vote": _t("text", "vote", "accept | reject"),
    "Woolf-Voter": _t("text", "vote", "the validator who voted"),
    "Woolf-Candidate-Sha256": _t("sha256", "vote", "sha256 of the candidate weights an accept names"),
    "Woolf-Task": _t("text", "task submission", "the training task's id"),
    "Woolf-Task-State": _t("text", "task", "reserved | started | heartbeat | submitted | cancelled | failed"),
    "Woolf-Shard": _t("text", "task", "whose data, from which version: owner@vN"),
    "Woolf-Steps": _t("int", "task", "the training steps reserved"),
    "Woolf-Lease": _t("float", "task", "seconds the reservation holds without a heartbeat"),
    "Woolf-Retrain": _t("json", "version verdict vote", "the audit of the PR's proof of training: drawn?, matched?"),
    "Woolf-Challenge": _t("json", "challenge", "the segments of a drawn PR whose states a validator asks for"),
    "Woolf-Deadline": _t("int", "challenge", "unix seconds (the hub's clock) by which a challenge is answered"),
    "Woolf-Answer": _t("json", "answer", "the challenge answered and the states served, in storage"),
    "Woolf-Receipt": _t("int", "receipt", "the hub's receipt number, consecutive from 1"),
    "Woolf-Received": _t("json", "receipt", "the PR ids whose heads one push created, in order"),
    "Woolf-Signed": _t("json", "receipt", "those of them signed by the key of the contributor they name"),
}


def known(name: str) -> bool:
    return name in TRAILERS
