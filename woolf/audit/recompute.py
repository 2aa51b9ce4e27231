"""Re-verify a ledger bit for bit: every merged version recomputed from its parent and delta.

Usage:
    report = audit(ledger)                 # AuditReport(ok, versions_checked, problems)
    report.ok
    audit(ledger, reevaluate=True)         # also re-run the benchmark on every merged version

For each version on main's first-parent chain: numbering, staleness from
ancestry, attenuation, alpha and merge rule against the config in force at the
merge's parent, the weights (and outer state) objects in storage against their
pointers, and the merge recomputed under the rule and parameters the version
recorded: weights and outer state against their recorded sha256.
Then who made each commit and whether the verdicts agree (woolf/audit/authority.py).
With an origin, the audit fetches and audits origin's main and PR refs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from woolf.audit.authority import check_authority
from woolf.core.merge_rules import Rule
from woolf.core.staleness import attenuation
from woolf.errors import StorageError, WoolfError
from woolf.ledger.benchmark import hidden_note
from woolf.ledger.retention.deltas import gc_removable, merged_delta
from woolf.ledger.transition import open_delta, recorded_rule, transition
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.storage.outer_state import load_state, state_bytes
from woolf.storage.weights import TRUSTED_LIMITS, load_trusted, read_spec, spec_of
from woolf.storage.writer import sha256_of


@dataclass
class AuditReport:
    ok: bool = True
    versions_checked: int = 0
    problems: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    signed: bool = False

    def problem(self, version: int | None, what: str, kind: str = "wrong", commit: str | None = None) -> None:
        """kind: "missing" (an object is not in storage: re-upload it), "unreachable", or "wrong"."""
        self.ok = False
        self.problems.append({"version": version, "problem": what, "kind": kind,
                              **({"commit": commit} if commit else {})})

    def to_json(self) -> dict:
        return {"ok": self.ok, "versions_checked": self.versions_checked, "problems": self.problems,
                "signed": self.signed, "notes": self.notes}


def audit(ledger, progress=None, reevaluate: bool = False) -> AuditReport:
    report = AuditReport()
    if ledger.has_origin():  # audit what everyone shares, with its verdict refs
        try:
            ledger.fetch()
            ledger.main_ref = "refs/remotes/origin/main"
            ledger.reread_config()
        except WoolfError as exc:
            report.notes.append(f"origin unreachable, audited the local main: {exc.message}")
    versions = list(reversed(ledger.log()))
    head, removed = (versions[-1].version if versions else 0), 0
    tampered: set[int] = set()  # versions whose stored object is not their bytes (rebuilt around)
    prev = None
    prev_weights = prev_state = None
    for i, v in enumerate(versions):
        if progress:
            progress(i, len(versions), v.version)
        report.versions_checked += 1
        if v.version != i:
            report.problem(v.version, f"version numbers are not consecutive (expected {i})")
            prev, prev_weights = v, None
            continue
        stored = None  # the version's object, verified (md5, sha256); loaded only if the merge is not recomputed
        try:
            ledger.store.verify_remote(ledger.pointer(v.commit))
            ledger.last_rebuild = None
            stored = ledger.weights_path(v)
            for t in (ledger.last_rebuild or {}).get("tampered", []):  # rebuilt around: named, never trusted
                if t["version"] not in tampered:
                    tampered.add(t["version"])
                    report.problem(t["version"], f"weights: object {t['md5']} in storage does not match its hash "
                                   "(corrupted or tampered); never trusted, rebuilt from a snapshot and the deltas",
                                   "wrong")
        except WoolfError as exc:
            if not (_kind(exc) == "missing" and prev_weights is not None and gc_removable(ledger, v, head)):
                report.problem(v.version, f"weights: {exc.message}", _kind(exc))
                prev, prev_weights = v, None
                continue
            removed += 1  # not kept (`woolf gc`): recomputed from its parent and delta below
        spec = read_spec(stored, TRUSTED_LIMITS, f"version {v.version}") if stored is not None \
            else spec_of(prev_weights)
        state, state_ok = _state_of(ledger, report, v, spec)
        if prev is not None and v.submission is not None:  # change versions: woolf/audit/authority.py
            recomputed = _check_merge(ledger, report, prev, v, prev_weights, prev_state)
        else:
            recomputed = prev_weights if prev is not None and v.weights_sha256 == prev.weights_sha256 else None
        if stored is None and recomputed is None:
            report.problem(v.version, "weights are not stored (gc) and cannot be recomputed", "missing")
        # recomputed weights hash to the version's sha256, as the stored object does (weights_path
        # checked it): the same bytes, so the stored copy is read only when nothing was recomputed,
        # after the parent's weights are dropped (two models at a time, never three)
        prev_weights = None
        if recomputed is None and stored is not None:
            recomputed = load_trusted(stored)
        prev, prev_weights, prev_state = v, recomputed, (state if state_ok else _UNKNOWN)
    if removed:
        report.notes.append(f"{removed} versions' weights are not kept in storage (`woolf gc`); "
                            "each was recomputed from its parent and delta")
    check_authority(ledger, report, versions, reevaluate=reevaluate)
    note = hidden_note(ledger.config)  # what cannot be checked without the validators' private benchmark
    if note:
        report.notes.append(note)
    return report


def _kind(exc: WoolfError) -> str:
    """Missing from storage (bytes lost, nothing forged) or wrong (bytes or records do not agree)."""
    if isinstance(exc, StorageError):
        return "missing" if "missing from storage" in exc.message else "unreachable"
    return "wrong"


_UNKNOWN = object()  # a parent state that could not be read: the child cannot be recomputed


def _state_of(ledger, report, v, spec):
    """(the version's outer state or None, whether it could be read)."""
    try:
        path = ledger.state_path(v)
        if path is None:
            return None, True
        ledger.store.verify_remote(ledger.pointer(v.commit, layout.STATE_POINTER))
        return load_state(path, spec, ledger.config.limits), True
    except WoolfError as exc:
        report.problem(v.version, f"outer state: {exc.message}", _kind(exc))
        return None, False


def _check_merge(ledger, report, prev, v, prev_weights, prev_state):
    """The merge's weights recomputed (None if they could not be, or differ from the record)."""
    git = ledger.git
    if len(v.parents) != 2 or v.parents[0] != prev.commit:
        report.problem(v.version, "not a merge of its predecessor and a submission commit")
        return None
    sub_head = v.parents[1]
    sub_parents = git.parents(sub_head)
    base = ledger.version_at(sub_parents[0]) if len(sub_parents) == 1 else None
    if base is None or base.version != v.base_version:
        report.problem(v.version, "the submission's parent is not the recorded base version")
        return None
    staleness = ledger.staleness(base.commit, prev.commit)
    if staleness != v.staleness:
        report.problem(v.version, f"recorded staleness {v.staleness}, ancestry says {staleness}")
    # the config in force for this merge is the one on its parent: a later change applies from then on
    cfg = parse_config((git.show_bytes(f"{v.parents[0]}:{layout.CONFIG}") or b"").decode())
    expected_att = attenuation(cfg.merge.staleness, staleness)
    if v.attenuation is None or abs(v.attenuation - expected_att) > 1e-12:
        report.problem(v.version, f"recorded attenuation {v.attenuation}, the config gives {expected_att}")
    if v.alpha is None or v.alpha != cfg.merge.alpha_base:
        report.problem(v.version, f"recorded alpha {v.alpha}, the config has {cfg.merge.alpha_base}")
    try:
        rule = recorded_rule(v)
    except (ValueError, TypeError) as exc:
        report.problem(v.version, f"recorded merge rule: {exc}")
        return None
    configured = Rule.from_config(cfg.merge)
    if (rule.kind, rule.params()) != (configured.kind, configured.params()):
        report.problem(v.version, f"recorded rule {rule.kind} {rule.params()}, the config in force had "
                                  f"{configured.kind} {configured.params()}")
    changed = set(git.changed_paths(prev.commit, v.commit))
    if changed - layout.VERSION_PATHS:
        report.problem(v.version, f"the merge also changed {sorted(changed - layout.VERSION_PATHS)}")
    try:
        path, declared = merged_delta(ledger, v)
        if prev_weights is None or prev_state is _UNKNOWN:
            return None
        delta = open_delta(path, declared, spec_of(prev_weights), TRUSTED_LIMITS)  # dense: tensor by tensor
    except WoolfError as exc:
        report.problem(v.version, f"delta: {exc.message}", _kind(exc))
        return None
    try:  # clipped as the validator clipped it; the parent's memory receives the candidate where it can
        step = transition(rule, prev_weights, prev_state, delta, v.attenuation or 0.0, clip=v.delta_clip)
    except (ValueError, KeyError, RuntimeError) as exc:
        report.problem(v.version, f"delta does not fit the model: {exc}")
        return None
    ok = sha256_of(step.candidate) == v.weights_sha256  # safetensors' bytes, hashed without building them
    if not ok:
        report.problem(v.version, "recomputed weights differ from the recorded sha256 (forged or wrong merge)")
    want_state = hashlib.sha256(state_bytes(step.state)).hexdigest() if step.state is not None else None
    if want_state != v.state_sha256:
        report.problem(v.version, "recomputed outer state differs from the recorded sha256 "
                                  "(forged or wrong merge)")
    return step.candidate if ok else None
