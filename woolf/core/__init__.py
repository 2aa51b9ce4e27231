"""Layer 3: pure arithmetic of the ledger (torch and numpy, no git, no files, no network).

Modules: merge and merge_rules (the merge and the rules that keep state), staleness, policy,
compress (topk deltas), npdelta, finite, scores, ratings, fairness, bisect, tensordiff, retrain_speed
(the validator's re-training estimate).

Usage:
    from woolf.core.merge_rules import merge_step
"""
