"""Layer 5: the model, its training and its evaluation, behind one interface (base.py); what a
workload offers beyond it, it declares in FEATURES (features.py).

Built-ins: charlm (a byte-level transformer), hf/ (any local Hugging Face causal LM), synthetic
(benchmarks), command (an external training command). docs/workloads.md is the guide.

Usage:
    from woolf.workloads.base import load_workload
"""
