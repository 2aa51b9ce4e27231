"""A local Hugging Face model directory: checked, then turned into a ledger's model files and genesis.

Usage:
    imported = import_model_dir(Path("my-model"), cfg.limits)   # refuses anything it cannot trust
    imported.params    # workload.params: {"model": "ledger/model", "files": {name: sha256}, ...}
    imported.files     # {"ledger/model/config.json": bytes, ...}: committed in the ledger
    imported.weights   # genesis: the checkpoint's tensors under the model's own names

    config = build_config(config_bytes)           # a transformers config; never remote code
    tok = load_tokenizer(tokenizer_bytes, config)  # a `tokenizers` tokenizer that fits the model

The architecture's code always comes from the installed `transformers`; a
config that names its own code (`auto_map`, or a directory with .py files) is
refused, and so is a model type that is not a causal language model.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from woolf.errors import UsageError
from woolf.storage.shards import INDEX, check_sharded

MODEL_DIR = "ledger/model"
REQUIRED = ("config.json", "tokenizer.json")  # committed and pinned; the weights go to DVC
# Every other file a model needs to be used, kept (committed, pinned, exported) where present:
# its chat template, special and added tokens, a slow tokenizer's vocabulary, processor configs.
OPTIONAL = ("tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
            "chat_template.jinja", "chat_template.json", "added_tokens.json",
            "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
            "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
TEMPLATES = "additional_chat_templates"  # transformers 5's named chat templates: TEMPLATES/NAME.jinja
WEIGHT_FILES = re.compile(r"model(-\d+-of-\d+)?\.safetensors(\.index\.json)?")
SAFE_NAME = re.compile(rf"({TEMPLATES}/)?[A-Za-z0-9_][A-Za-z0-9_.-]*")
CONVERT = ("from transformers import AutoModelForCausalLM, AutoTokenizer; "
           "AutoModelForCausalLM.from_pretrained(SRC).save_pretrained(DIR); "
           "AutoTokenizer.from_pretrained(SRC).save_pretrained(DIR)")


@dataclass
class Imported:
    params: dict
    files: dict[str, bytes]
    weights: dict[str, torch.Tensor]

    def as_dtype(self, dtype: str) -> dict[str, torch.Tensor]:
        """The weights with every floating tensor in ``dtype`` (``--set workload.params.dtype=...``)."""
        want = getattr(torch, dtype)
        return {k: v.to(want) if v.is_floating_point() else v for k, v in self.weights.items()}


def transformers_version() -> str:
    import transformers  # deferred: transformers

    return transformers.__version__


def _need_transformers() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"  # forced, never defaulted: nothing is ever downloaded
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import tokenizers  # noqa: F401  # deferred: tokenizers
        import transformers  # deferred: transformers
    except ImportError:
        raise UsageError("the transformers workload needs the `transformers` and `tokenizers` packages",
                         hint='the hf extra: `pip install -e ".[hf]"` in your GoodWoolf checkout') from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


BUILTIN_ATTENTION = {None, "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"}
_LOADS_CODE = {"auto_map", "trust_remote_code", "custom_pipelines", "use_kernels", "kernel_config"}


def code_problem(raw, where: str, depth: int = 0) -> None:
    """Refuse a config that makes transformers reach for code: an `attn_implementation` naming anything
    but a built-in kernel (a Hub kernel repo, "org/name"), `auto_map` at any depth (a nested
    text_config too), and any field that loads code. Checked at every level of nesting."""
    if depth > 16:
        raise UsageError(f"{where}: nested deeper than 16 levels")
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in items:
        if key in _LOADS_CODE:
            raise UsageError(f"{where}: {key!r} loads code from outside the installed transformers "
                             "(woolf never sets trust_remote_code); refused",
                             hint="use a model type that transformers ships (docs/workloads.md)")
        if key in ("attn_implementation", "_attn_implementation") and value not in BUILTIN_ATTENTION:
            raise UsageError(f"{where}: attn_implementation {str(value)[:80]!r} is not a built-in attention "
                             f"({', '.join(sorted(x for x in BUILTIN_ATTENTION if x))}); a kernel from the Hub "
                             "is code, refused")
        code_problem(value, where, depth + 1)


def build_config(data: bytes, where: str = "config.json"):
    """A transformers config for a causal LM known to the installed transformers; never remote code."""
    _need_transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # deferred: transformers
    from transformers.models.auto.modeling_auto import (  # deferred: transformers
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    )

    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: not a JSON object")
    code_problem(raw, where)
    if "auto_map" in raw:
        raise UsageError(
            f"{where}: the model needs its own Python code (auto_map: {sorted(raw['auto_map'])}); "
            f"woolf builds models only with the installed transformers {transformers_version()}, "
            "never with code from a checkpoint (no trust_remote_code)",
            hint="use a model type that transformers ships, or the external-command route "
                 "(docs/workloads.md)")
    model_type = raw.get("model_type")
    if model_type not in CONFIG_MAPPING:
        raise UsageError(f"{where}: model_type {model_type!r} is not known to transformers "
                         f"{transformers_version()}", hint="upgrade transformers, or check config.json")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise UsageError(f"{where}: model_type {model_type!r} is not a causal language model in transformers",
                         hint="the transformers workload trains AutoModelForCausalLM models")
    try:
        return CONFIG_MAPPING[model_type].from_dict(raw)
    except Exception as exc:  # any malformed field: say where
        raise UsageError(f"{where}: transformers cannot read it: {exc}") from None


def not_causal_lm(config, where: str) -> None:
    """Refuse a checkpoint whose config.json says it is not a causal LM (``architectures``): a
    sentence encoder such as BertModel has a model_type transformers can build a causal LM of, but
    no language-model head, and would load as random weights beside a mismatch."""
    from transformers.models.auto.modeling_auto import (  # deferred: transformers
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    archs = [a for a in getattr(config, "architectures", None) or [] if isinstance(a, str)]
    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    if not archs or any(a in causal or a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return
    encoder = (config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False))
    what = "an encoder (a sentence or masked-LM model)" if encoder else "a model without a causal language-model head"
    want = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type, "LlamaForCausalLM")
    raise UsageError(f"{where}: the checkpoint is a {', '.join(archs)}: {what}, not a causal language model",
                     hint=f"the transformers workload trains AutoModelForCausalLM checkpoints (architectures "
                          f"naming a *ForCausalLM class, e.g. {want}); train any other model with the "
                          "external-command workload (docs/workloads.md)")


def load_tokenizer(data: bytes, config, where: str = "tokenizer.json"):
    """The `tokenizers` tokenizer in ``data``, checked against the model's vocabulary."""
    _need_transformers()
    from tokenizers import Tokenizer  # deferred: tokenizers

    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:
        raise UsageError(f"{where}: not a `tokenizers` tokenizer ({str(exc)[:200]})",
                         hint=f"write one with AutoTokenizer.save_pretrained: {CONVERT}") from None
    tok.no_padding()
    tok.no_truncation()
    size, vocab = tok.get_vocab_size(with_added_tokens=True), getattr(config, "vocab_size", None)
    if vocab is None or size > vocab:
        raise UsageError(f"{where}: the tokenizer does not match the model: it has {size} tokens, "
                         f"the model's embeddings {vocab}",
                         hint="use the tokenizer the checkpoint was trained with")
    return tok


def kept_files(path: Path) -> dict[str, bytes]:
    """The files of the model directory ``path`` a ledger keeps beside config.json (OPTIONAL, and
    TEMPLATES/*.jinja), each JSON one refused if a field of it loads code (auto_map in a
    tokenizer_config.json, a processor config or generation_config.json)."""
    names = [n for n in REQUIRED + OPTIONAL if (path / n).is_file()]
    if (path / TEMPLATES).is_dir():
        names += sorted(f"{TEMPLATES}/{p.name}" for p in (path / TEMPLATES).glob("*.jinja")
                        if p.is_file() and SAFE_NAME.fullmatch(f"{TEMPLATES}/{p.name}"))
    raw = {n: (path / n).read_bytes() for n in names}
    for name, data in raw.items():
        if name.endswith(".json") and name != "config.json":  # config.json: build_config checks it
            try:
                parsed = json.loads(data)
            except (ValueError, UnicodeDecodeError) as exc:
                raise UsageError(f"{path / name}: not valid JSON ({exc})") from None
            code_problem(parsed, f"{path / name}")
    return raw


def left_out(path: Path, kept) -> list[str]:
    """What ``woolf init`` does not keep of a model directory: every file but the kept ones, the
    weights and hidden files (.git, .cache), so that init can name them."""
    out = []
    for p in sorted(Path(path).rglob("*")):
        rel = p.relative_to(path)
        if (p.is_file() and not any(part.startswith(".") for part in rel.parts)
                and rel.as_posix() not in kept and not WEIGHT_FILES.fullmatch(rel.as_posix())):
            out.append(rel.as_posix())
    return out


def max_positions(config) -> int | None:
    """The longest sequence the model takes, when its config says (GPT-2 and Llama name it differently)."""
    for key in ("n_positions", "max_position_embeddings", "n_ctx", "max_sequence_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def canonical(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state with tied copies dropped (first name wins, as save_pretrained writes)."""
    seen, out = set(), {}
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:
            continue
        seen.add(id(t))
        out[name] = t.detach()
    return out


def _dtype_of(spec, where: Path) -> str:
    floats = {d for d, _ in spec.values() if d in ("F32", "F16", "BF16", "F64")}
    names = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
    if len(floats) != 1:
        raise UsageError(f"{where} mixes floating dtypes {sorted(floats)}",
                         hint="save it in one dtype: model.to(torch.float32).save_pretrained(DIR)")
    return names[floats.pop()]


def master_dtype(dtype: str) -> str:
    """What a ledger stores and merges for a checkpoint of ``dtype``: float32 for bf16/fp16.

    Updates of a fine-tuning step (~1e-5 per element) are below half a bf16 ulp of weights
    ~0.02: merged in bf16 most of them would round away (benchmarks/bf16_masters.py)."""
    return "float32" if dtype in ("bfloat16", "float16") else dtype


def _gguf(path: Path) -> None:
    """A GGUF checkpoint (llama.cpp's format; a directory of them, or one file) is named as what it is, with
    the conversion that makes the directory init reads (a GGUF directory was refused as "holds Python code"
    for the conversion scripts beside it)."""
    found = sorted(p.name for p in path.glob("*.gguf")) if path.is_dir() else [path.name] \
        if path.suffix.lower() == ".gguf" else []
    if not found or (path / "model.safetensors").is_file() or (path / INDEX).is_file():
        return  # safetensors beside the GGUF files: those are the model
    src = path if path.is_dir() else path.parent
    raise UsageError(f"{path} holds a GGUF checkpoint ({', '.join(found[:3])}): woolf reads a Hugging Face "
                     "model directory (config.json, model.safetensors, tokenizer.json)",
                     hint=f"convert it once (needs the gguf package): from transformers import "
                          f"AutoModelForCausalLM, AutoTokenizer; m = AutoModelForCausalLM.from_pretrained("
                          f"'{src}', gguf_file='{found[0]}'); m.save_pretrained('DIR'); AutoTokenizer."
                          f"from_pretrained('{src}', gguf_file='{found[0]}').save_pretrained('DIR')")


def import_model_dir(path: Path | None, limits) -> Imported:
    """Everything ``woolf init --workload transformers --weights DIR`` commits, or a clear refusal."""
    if path is not None:
        _gguf(Path(path))
    if path is None or not Path(path).is_dir():
        raise UsageError("the transformers workload starts from a local model directory: "
                         f"--weights DIR (got {path or 'none'})",
                         hint="a directory with config.json, model.safetensors and tokenizer.json")
    path = Path(path)
    _need_transformers()
    code = sorted(p.name for p in path.glob("*.py"))
    if code:
        raise UsageError(f"{path} holds Python code ({', '.join(code)}); woolf never runs a checkpoint's code",
                         hint="use a model whose architecture transformers ships")
    sharded = (path / INDEX).is_file()
    if not sharded and not (path / "model.safetensors").is_file():
        other = [p.name for p in path.iterdir() if p.name.endswith((".bin", ".index.json", ".pt"))]
        raise UsageError(f"{path}: no model.safetensors" + (f" (found {', '.join(sorted(other))})" if other else ""),
                         hint=f"model.safetensors, or shards and {INDEX}, are needed; convert with: {CONVERT}")
    for name in REQUIRED:
        if not (path / name).is_file():
            raise UsageError(f"{path}: no {name}", hint=f"save the model and its tokenizer with: {CONVERT}")
    raw = kept_files(path)
    config = build_config(raw["config.json"], f"{path / 'config.json'}")
    not_causal_lm(config, f"{path / 'config.json'}")
    load_tokenizer(raw["tokenizer.json"], config, f"{path / 'tokenizer.json'}")
    if sharded:  # every shard checked against the index before transformers reads one
        spec, _ = check_sharded(path, limits)
    else:
        from woolf.storage.weights import read_spec  # deferred: loads numpy

        spec = read_spec(path / "model.safetensors", limits, f"{path / 'model.safetensors'}")
    dtype = _dtype_of(spec, path / (INDEX if sharded else "model.safetensors"))

    from transformers import AutoModelForCausalLM  # deferred: transformers

    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            str(path), config=config, dtype=getattr(torch, dtype), local_files_only=True,
            trust_remote_code=False, use_safetensors=True, output_loading_info=True)
    except Exception as exc:
        raise UsageError(f"{path}: transformers cannot load the checkpoint: {str(exc)[:300]}") from None
    master = master_dtype(dtype)
    state = canonical(model)
    del model  # each checkpoint tensor is freed once its master is made: never both models whole
    weights = {}
    for k in list(state):
        v = state.pop(k)
        weights[k] = v.to(getattr(torch, master)).contiguous() if v.is_floating_point() else v.clone().contiguous()
        del v
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    missing = set(problems.get("missing_keys", ())) & set(weights)
    if missing or problems.get("unexpected_keys") or problems.get("mismatched_keys"):
        raise UsageError(f"{path / (INDEX if sharded else 'model.safetensors')} does not fit config.json: "
                         + "; ".join(f"{k} {sorted(map(str, v))[:4]}" for k, v in problems.items() if v),
                         hint="the weights and config.json must come from the same save_pretrained")
    files = {f"{MODEL_DIR}/{n}": b for n, b in raw.items()}
    params = {"model": MODEL_DIR, "files": {n: hashlib.sha256(b).hexdigest() for n, b in raw.items()},
              "dtype": master, "transformers": transformers_version()}
    if master != dtype:  # the ledger keeps float32 masters; what the checkpoint was, for export
        params["checkpoint_dtype"] = dtype
    limit = max_positions(config)
    if limit:
        params["context"] = min(128, limit)  # the workload's default window, within the model's reach
    return Imported(params, files, weights)
