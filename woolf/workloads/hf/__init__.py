"""The `transformers` workload: bring your own Hugging Face causal LM (docs/workloads.md).

Usage:
    woolf init my-ledger --workload transformers --weights ./my-model
    from woolf.workloads.hf import Transformers, import_model_dir
"""

from woolf.workloads.hf.modeldir import import_model_dir
from woolf.workloads.hf.workload import Transformers

__all__ = ["Transformers", "import_model_dir"]
