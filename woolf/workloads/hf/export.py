"""The files beside the weights in an exported Hugging Face model directory (`woolf export`).

Usage:
    files = export_files(wl, "bfloat16")   # {"config.json": bytes, "tokenizer.json": bytes, ...}

They are the ledger's pinned model files (``wl.bind`` checked their sha256) with config.json's
``dtype`` set to what the weights are written in, and a generation_config.json made from the
config's special tokens when the checkpoint had none, so that
``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)`` load
the directory offline.
"""

from __future__ import annotations

import json

from woolf.workloads.hf.modeldir import transformers_version


def export_files(wl, dtype: str) -> dict[str, bytes]:
    blobs = wl.model_files()  # the pinned files, checked by bind
    config = json.loads(blobs["config.json"])
    config.pop("torch_dtype", None)  # transformers 5 names it dtype
    config["dtype"] = dtype
    blobs["config.json"] = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()
    if "generation_config.json" not in blobs:
        gen = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(k) is not None}
        gen["transformers_version"] = transformers_version()
        blobs["generation_config.json"] = (json.dumps(gen, indent=2, sort_keys=True) + "\n").encode()
    if "tokenizer_config.json" not in blobs:
        blobs["tokenizer_config.json"] = b'{"tokenizer_class": "PreTrainedTokenizerFast"}\n'
    return blobs
