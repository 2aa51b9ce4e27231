"""Storage that grows by deltas: snapshots every K versions, rebuilds of the others, and `woolf gc`."""
