"""The audit's authority checks: who made each commit on main, and do the verdicts agree with it.

Usage:
    check_authority(ledger, report, versions, reevaluate=False)   # called by woolf.audit.recompute.audit

Arithmetic alone is not proof: a version whose numbers add up may still never
have passed a validator. Checked here, for every commit on main's first-parent
chain (not only those with trailers): its shape, consecutive numbering and
signature (woolf/protocol/rules/main.py, keys in force before it); change
versions keep the weights; every verdict ref of the git-native forge agrees
with main (a merged verdict is a version on main, a merge names a PR whose
verdict is that version; a rewound main leaves merged verdicts off the chain);
rejected, expired and withdrawn verdicts are signed by a validator (or the
contributor), by the keys on main's head; under `validators.quorum` k > 1 each
merge and each rejection rests on k agreeing signed votes (checked with the
chain, woolf/protocol/rules/quorum.py), and each expiry on votes of k validators that failed
to agree, vote_timeout after the first. A verdict ref that claims nothing
(not a commit, or without verdict trailers: `pr list` shows it quarantined) is
a note, not a problem. With ``reevaluate`` each merged
version's weights are evaluated again and compared to the recorded metrics.
"""

from __future__ import annotations

import math
import os

from woolf.errors import ConfigError, WoolfError
from woolf.git.repo import BlobTooLargeError
from woolf.ledger.benchmark import ENV as HIDDEN_ENV
from woolf.ledger.benchmark import hidden_benchmark
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.rules.main import chain_problems
from woolf.protocol.rules.quorum import expiry_votes_problem, rejection_quorum_problem
from woolf.protocol.rules.submitter import contributor_in_id
from woolf.protocol.signatures import role_problem, signatures
from woolf.protocol.signers import Signers, signers_text
from woolf.protocol.trailers import int_field, parse_message
from woolf.workloads.features import BIND, features_of

REL_TOL = 1e-4  # evaluation on another machine may differ in the last bits


def check_authority(ledger, report, versions, reevaluate: bool = False) -> None:
    git = ledger.git
    chain = git.out("rev-list", "--first-parent", "--reverse", ledger.main_ref).split()
    head = chain[-1] if chain else None
    report.signed = head is not None and signers_text(git, head) is not None
    if not report.signed:
        report.notes.append("unsigned ledger (no ledger/allowed_signers on main): signatures not checked, "
                            "only the shape and numbering of main's commits")
    numbers = {v.commit: v.version for v in versions}
    problems = chain_problems(git, chain, first_number=0)
    last = -1
    for commit in chain:
        last = numbers.get(commit, last + 1)
        for what in problems[commit]:
            report.problem(last, f"{commit[:12]}: {what}", commit=commit)
    by_number = {v.version: v for v in versions}
    for v in versions:
        prev = by_number.get(v.version - 1)
        if v.submission is None and prev is not None and (v.weights_sha256, v.state_sha256) != (
                prev.weights_sha256, prev.state_sha256):
            report.problem(v.version, "a change version whose weights or outer state sha256 differ from its parent's")
    _check_verdicts(ledger, report, versions, head)
    if reevaluate:
        _reevaluate(ledger, report, versions)


def _check_verdicts(ledger, report, versions, head) -> None:
    git = ledger.git
    if ledger.config.forge.kind != "local":
        report.notes.append("verdicts live on the forge (forge.kind is not local): verdict refs not checked")
        return
    refs = git.refs(f"{layout.PR_PREFIX}/")
    on_main = {v.commit: v for v in versions}
    verdicts = {r.split("/")[3]: sha for r, sha in refs.items()
                if r.endswith("/verdict") and r.count("/") == 4 and layout.SUBMISSION_ID.match(r.split("/")[3])}
    kinds = _object_types(git, verdicts.values())
    for v in versions:
        if v.submission and verdicts.get(v.submission) != v.commit:
            report.problem(v.version, f"merges {v.submission}, whose verdict ref is not this version "
                                      f"({'missing' if v.submission not in verdicts else 'another commit'})")
    text = signers_text(git, head) if head else None
    try:
        signers = Signers.parse(text.decode(errors="replace")) if text else None
    except ConfigError:
        signers = None  # reported by the chain check
    closing = {}
    for sub_id, sha in sorted(verdicts.items()):
        state = _check_verdict(git, report, sub_id, sha, kinds, on_main, head)
        if state is not None and signers is not None:
            closing[sub_id] = (sha, state)
    if closing:
        _check_closers(git, report, closing, signers, text)


def _check_verdict(git, report, sub_id: str, sha: str, kinds: dict, on_main: dict, head) -> str | None:
    """PR ``sub_id``'s verdict ref at ``sha`` checked (problems and notes in ``report``): its closing state
    (rejected, withdrawn, expired) whose signer is then checked, or None (a version, or junk)."""
    if kinds.get(sha) != "commit":  # shown as quarantined by `pr list`: junk, not a claim
        report.notes.append(f"PR {sub_id}'s verdict ref is a {kinds.get(sha, 'missing object')}, not a commit")
        return None
    try:
        _, f = parse_message(git.message(sha))
    except BlobTooLargeError as exc:  # read size-first: quarantined by `pr list` too
        report.notes.append(f"PR {sub_id}'s verdict {sha[:12]} is unreadable ({exc.message}; quarantined, "
                            "claims nothing)")
        return None
    number = int_field(f, "Woolf-Version")
    if number is not None:
        if sha not in on_main:
            report.problem(number, f"PR {sub_id}'s merged verdict {sha[:12]} is not on main's "
                                   "first-parent chain (main was rewound or rewritten)", commit=sha)
        return None
    if f.get("Woolf-Verdict") not in ("rejected", "withdrawn", "expired") or f.get("Woolf-Submission") != sub_id:
        report.notes.append(f"PR {sub_id}'s verdict {sha[:12]} is neither a version nor a verdict commit "
                            "(quarantined, claims nothing)")
        return None
    if f["Woolf-Verdict"] == "rejected":  # validators.quorum > 1: k agreeing reject votes
        at = f.get("Woolf-Main") if f.get("Woolf-Main") in on_main else head  # the quorum in force then
        problem = rejection_quorum_problem(git, sub_id, f, at)
        if problem:
            report.problem(None, f"PR {sub_id}'s rejected verdict {sha[:12]}: {problem}", commit=sha)
    if f["Woolf-Verdict"] == "expired":  # votes of k validators that failed to agree, vote_timeout old
        problem = expiry_votes_problem(git, sub_id, f, sha, head)
        if problem:
            report.problem(None, f"PR {sub_id}'s expired verdict {sha[:12]}: {problem}", commit=sha)
    return f["Woolf-Verdict"]


def _check_closers(git, report, closing: dict, signers, text) -> None:
    """Each closing verdict signed by a validator (a withdrawal: or by the PR's own contributor)."""
    found = signatures(git, {sha: text for sha, _ in closing.values()})
    for sub_id, (sha, state) in closing.items():
        problem = role_problem(found.get(sha), signers, "validator")
        if problem and state == "withdrawn" and found.get(sha, ("N", ""))[0] == "G" \
                and found[sha][1] == contributor_in_id(sub_id):
            problem = None
        if problem:
            report.problem(None, f"PR {sub_id}'s {state} verdict {sha[:12]}: {problem}", commit=sha)


def _object_types(git, shas) -> dict[str, str]:
    """{sha: "commit" | "blob" | ...} in one `git cat-file --batch-check` call."""
    shas = list(dict.fromkeys(shas))
    if not shas:
        return {}
    out = git.run("cat-file", "--batch-check=%(objectname) %(objecttype)",
                  input=("\n".join(shas) + "\n").encode()).stdout.decode(errors="replace")
    return {p[0]: p[1] for p in (line.split() for line in out.splitlines()) if len(p) == 2}


def _reevaluate(ledger, report, versions) -> None:
    from woolf.workloads.base import load_workload  # deferred: loads torch

    for v in versions:
        if v.submission is None or not v.metrics:
            continue
        try:
            cfg = parse_config((ledger.git.show_bytes(f"{v.parents[0]}:{layout.CONFIG}") or b"").decode())
            wl = load_workload(cfg.workload)
            if BIND in features_of(wl):  # its model files, as that config pinned them (the transformers workload)
                wl.bind(lambda rel, at=v.parents[0]: ledger.git.show_bytes(f"{at}:{rel}"))
            if cfg.benchmark.hidden_sha256:  # the validators' private set: only with a copy at hand
                if not os.environ.get(HIDDEN_ENV):
                    continue
                bench = hidden_benchmark(cfg)
            else:
                bench = ledger.git.show_bytes(f"{v.commit}:{cfg.benchmark.path}") or b""
            seen = wl.evaluate(ledger.load_weights(v), bench, "cpu").get(cfg.policy.metric)
        except WoolfError as exc:
            report.problem(v.version, f"re-evaluation failed: {exc.message}")
            continue
        recorded = v.metrics.get(cfg.policy.metric)
        if not isinstance(recorded, (int, float)) or seen is None or not math.isclose(
                seen, recorded, rel_tol=REL_TOL, abs_tol=1e-6):
            report.problem(v.version, f"re-evaluated {cfg.policy.metric} {seen}, recorded {recorded}")
