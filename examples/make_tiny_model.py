"""Build a tiny Hugging Face causal LM in a local directory, with nothing downloaded.

Usage:
    python examples/make_tiny_model.py my-model                  # 2-layer GPT-2, ~0.1M parameters
    python examples/make_tiny_model.py my-model --arch llama --layers 4 --width 64
    woolf init my-ledger --key keys/me --workload transformers --weights my-model

It trains a byte-level BPE tokenizer with `tokenizers` on the Python standard
library's own sources (every Python install has them), builds the model from a
config with random weights, and saves both with save_pretrained
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json). Any
real checkpoint saved the same way is used the same way (docs/workloads.md).
"""

from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

SPECIAL = "<|endoftext|>"


def _texts(limit: int = 40) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.stat().st_size > 4000)[:limit]
    return [p.read_text(errors="replace") for p in files]


def make_tokenizer(vocab: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[SPECIAL], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_texts(), trainer=trainer)
    return tok


def make_tiny_model(out: Path, arch: str = "gpt2", layers: int = 2, width: int = 32, heads: int = 2,
                    context: int = 64, vocab: int = 512, seed: int = 0, dtype: str = "float32") -> Path:
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, PreTrainedTokenizerFast

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(vocab)
    eos = tok.token_to_id(SPECIAL)
    n_vocab = tok.get_vocab_size()
    if arch == "gpt2":
        config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, n_positions=context,
                            vocab_size=n_vocab, bos_token_id=eos, eos_token_id=eos)
    elif arch == "llama":
        config = LlamaConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
                             num_key_value_heads=heads, intermediate_size=2 * width, vocab_size=n_vocab,
                             max_position_embeddings=context, bos_token_id=eos, eos_token_id=eos,
                             tie_word_embeddings=True)
    else:
        raise SystemExit(f"--arch {arch!r}: use gpt2 or llama")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL, bos_token=SPECIAL).save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    path = make_tiny_model(a.out, a.arch, a.layers, a.width, a.heads, a.context, a.vocab, a.seed)
    print(f"wrote {', '.join(sorted(p.name for p in path.iterdir()))} to {path}")


if __name__ == "__main__":
    main()
