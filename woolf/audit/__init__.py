"""Layer 7, a role: anyone re-verifies the ledger bit for bit.

Modules: recompute.py (every merge recomputed from its parent and delta), authority.py
(signatures, shapes, numbering, verdict refs, --reevaluate). Imports no other role.

Usage:
    from woolf.audit.recompute import audit
    report = audit(ledger)
"""
