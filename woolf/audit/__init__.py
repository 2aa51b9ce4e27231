"""Layer 7, a role: anyone re-verifies the ledger bit for bit.

Modules: recompute.py (every merge recomputed from its parent and delta), authority.py
(signatures, shapes, numbering, verdict refs, --reevaluate). Imports no other role.

Usage:
    from woolf.audit import audit
    report = audit(ledger)                 # AuditReport(ok, versions_checked, problems)
"""

from woolf.audit.recompute import AuditReport, audit

__all__ = ["AuditReport", "audit"]
