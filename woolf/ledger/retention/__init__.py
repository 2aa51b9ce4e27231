"""Storage that grows by deltas: snapshots every K versions, rebuilds of the others, `woolf gc`.

Usage:
    from woolf.ledger.retention.gc import survey, collect
"""
