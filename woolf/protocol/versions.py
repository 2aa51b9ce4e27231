"""Model versions read from git's first-parent history and commit trailers.

Usage:
    versions = read_versions(git, "refs/heads/main", limit=10)   # newest first
    versions[0].version, versions[0].to_json()

Reading the whole history is one `git log` call: no checkout, no download.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from woolf.git.repo import Git
from woolf.protocol.trailers import float_field, int_field, json_field, parse_message


@dataclass
class Version:
    version: int
    commit: str
    time: int  # commit time, unix seconds
    subject: str
    base_version: int | None = None
    staleness: int | None = None
    attenuation: float | None = None
    alpha: float | None = None
    rule: str | None = None  # merge rule of this version (None: written before rules, = attenuated)
    rule_params: dict | None = None
    state_sha256: str | None = None  # sha256 of the outer state file, when the rule keeps state
    contributor: str | None = None
    submission: str | None = None
    metrics: dict | None = None  # the candidate's benchmark metrics (after the merge)
    metrics_before: dict | None = None
    weights_sha256: str | None = None
    delta_sha256: str | None = None
    validator: str | None = None
    device: str | None = None  # where the validator evaluated: "cpu; torch 2.13.0", "cuda:<name>; ..."
    timings: dict | None = None
    reverts: int | None = None  # the version whose merge this one takes back (woolf revert)
    delta_clip: float | None = None  # the factor the validator scaled the delta by (scoring.norm_action = clip)
    change: str | None = None  # a maintainer's change version: "config" or "signers" (Woolf-Change)
    parents: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)  # shallow: dataclasses.asdict's deep copy is slow at 10k versions


def version_from_message(commit: str, parents: list[str], time: int, message: str) -> Version | None:
    subject, f = parse_message(message)
    number = int_field(f, "Woolf-Version")
    if number is None:
        return None
    return Version(
        version=number,
        commit=commit,
        time=time,
        subject=subject,
        base_version=int_field(f, "Woolf-Base-Version"),
        staleness=int_field(f, "Woolf-Staleness"),
        attenuation=float_field(f, "Woolf-Attenuation"),
        alpha=float_field(f, "Woolf-Alpha"),
        rule=f.get("Woolf-Rule"),
        rule_params=json_field(f, "Woolf-Rule-Params"),
        state_sha256=f.get("Woolf-State-Sha256"),
        contributor=f.get("Woolf-Contributor"),
        submission=f.get("Woolf-Submission"),
        metrics=json_field(f, "Woolf-Metrics-After") or json_field(f, "Woolf-Metrics"),
        metrics_before=json_field(f, "Woolf-Metrics-Before"),
        weights_sha256=f.get("Woolf-Weights-Sha256"),
        delta_sha256=f.get("Woolf-Delta-Sha256"),
        validator=f.get("Woolf-Validator"),
        device=f.get("Woolf-Device") if isinstance(f.get("Woolf-Device"), str) else None,
        timings=json_field(f, "Woolf-Timings"),
        reverts=int_field(f, "Woolf-Reverts"),
        delta_clip=float_field(f, "Woolf-Delta-Clip"),
        change=f.get("Woolf-Change") if isinstance(f.get("Woolf-Change"), str) else None,
        parents=parents,
    )


def read_versions(git: Git, ref: str, limit: int | None = None, skip: int = 0) -> list[Version]:
    """main's first-parent chain from ``ref``, newest first; commits read framed by size (Git.commit_records)."""
    args = ["rev-list", "--first-parent"]
    if limit is not None:
        args.append(f"-n{limit}")
    if skip:
        args.append(f"--skip={skip}")
    tip = git.rev_parse(ref) if limit == 1 and not skip else None  # the tip alone: no rev-list process
    versions = []
    for commit, parents, time, message in git.commit_records([tip] if tip else git.out(*args, ref).split()):
        v = version_from_message(commit, parents, time, message)
        if v is not None:
            versions.append(v)
    return versions
