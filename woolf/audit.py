"""Re-verify a ledger bit for bit: every merged version recomputed from its parent and delta.

Usage:
    report = audit(ledger)                 # AuditReport(ok, versions_checked, problems)
    report.ok

For each version on main's first-parent chain: numbering, staleness from
ancestry, attenuation and alpha from the config, the weights object in storage
against its pointer, and the recomputed merge against the recorded sha256.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from safetensors.torch import save

from woolf import layout
from woolf.config import parse_config
from woolf.core.merge import apply_delta, merge_scale
from woolf.core.staleness import attenuation
from woolf.errors import WoolfError
from woolf.storage.pointer import Pointer
from woolf.storage.weights import load_trusted


@dataclass
class AuditReport:
    ok: bool = True
    versions_checked: int = 0
    problems: list[dict] = field(default_factory=list)

    def problem(self, version: int, what: str) -> None:
        self.ok = False
        self.problems.append({"version": version, "problem": what})

    def to_json(self) -> dict:
        return {"ok": self.ok, "versions_checked": self.versions_checked, "problems": self.problems}


def audit(ledger, progress=None) -> AuditReport:
    report = AuditReport()
    versions = list(reversed(ledger.log()))
    prev = None
    prev_weights = None
    for i, v in enumerate(versions):
        if progress:
            progress(i, len(versions), v.version)
        report.versions_checked += 1
        if v.version != i:
            report.problem(v.version, f"version numbers are not consecutive (expected {i})")
            prev, prev_weights = v, None
            continue
        try:
            ledger.store.verify_remote(ledger.pointer(v.commit))
            current = load_trusted(ledger.weights_path(v))
        except WoolfError as exc:
            report.problem(v.version, f"weights: {exc.message}")
            prev, prev_weights = v, None
            continue
        if prev is not None:
            _check_merge(ledger, report, prev, v, prev_weights)
        prev, prev_weights = v, current
    return report


def _check_merge(ledger, report, prev, v, prev_weights) -> None:
    git = ledger.git
    if len(v.parents) != 2 or v.parents[0] != prev.commit:
        report.problem(v.version, "not a merge of its predecessor and a submission commit")
        return
    sub_head = v.parents[1]
    sub_parents = git.parents(sub_head)
    base = ledger.version_at(sub_parents[0]) if len(sub_parents) == 1 else None
    if base is None or base.version != v.base_version:
        report.problem(v.version, "the submission's parent is not the recorded base version")
        return
    staleness = int(git.out("rev-list", "--count", "--first-parent", f"{base.commit}..{prev.commit}"))
    if staleness != v.staleness:
        report.problem(v.version, f"recorded staleness {v.staleness}, ancestry says {staleness}")
    cfg = parse_config((git.show_bytes(f"{prev.commit}:{layout.CONFIG}") or b"").decode())
    expected_att = attenuation(cfg.merge.staleness, staleness)
    if v.attenuation is None or abs(v.attenuation - expected_att) > 1e-12:
        report.problem(v.version, f"recorded attenuation {v.attenuation}, the config gives {expected_att}")
    if v.alpha is None or v.alpha != cfg.merge.alpha_base:
        report.problem(v.version, f"recorded alpha {v.alpha}, the config has {cfg.merge.alpha_base}")
    changed = set(git.changed_paths(prev.commit, v.commit))
    if changed - {layout.POINTER}:
        report.problem(v.version, f"the merge also changed {sorted(changed - {layout.POINTER})}")
    _, ptr_rel, _ = layout.submission_paths(v.submission or "")
    raw = git.show_bytes(f"{sub_head}:{ptr_rel}")
    try:
        delta = load_trusted(ledger.store.fetch_object(Pointer.parse(raw or b"", ptr_rel)))
    except WoolfError as exc:
        report.problem(v.version, f"delta: {exc.message}")
        return
    if prev_weights is None:
        return
    scale = merge_scale(v.alpha or 0.0, v.attenuation or 0.0)
    try:
        data = save(apply_delta(prev_weights, delta, scale))
    except ValueError as exc:
        report.problem(v.version, f"delta does not fit the model: {exc}")
        return
    if hashlib.sha256(data).hexdigest() != v.weights_sha256:
        report.problem(v.version, "recomputed weights differ from the recorded sha256 (forged or wrong merge)")
