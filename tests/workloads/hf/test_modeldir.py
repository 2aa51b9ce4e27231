"""A model directory as woolf reads it (woolf/workloads/hf/modeldir.py): every file a real instruct model
needs survives init and export, files that load code are refused, what woolf cannot read is named.

A tiny Llama-shaped model is built locally (examples/make_tiny_model.py; nothing downloaded) and
given a chat template, a special tokens map, added tokens, a slow tokenizer's vocabulary and a
preprocessor config, as a real instruct checkpoint has them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import pytest

from woolf.errors import UsageError  # noqa: E402
from woolf.ledger.ledger import Ledger  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("make_tiny_model", ROOT / "examples" / "make_tiny_model.py")
tiny = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny)

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
CHAT = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]
SMALL = ["--set", "workload.params.context=32", "--set", "workload.params.benchmark_bytes=3000"]


@pytest.fixture(scope="module")
def instruct_dir(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer

    out = tiny.make_tiny_model(tmp_path_factory.mktemp("models") / "instruct", arch="llama")
    tok = AutoTokenizer.from_pretrained(out)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(out)
    assert (out / "chat_template.jinja").is_file()  # transformers 5 writes the template beside the config
    (out / "special_tokens_map.json").write_text(json.dumps({"eos_token": tiny.SPECIAL}))
    (out / "added_tokens.json").write_text(json.dumps({tiny.SPECIAL: 0}))
    (out / "merges.txt").write_text("#version: 0.2\n")
    (out / "preprocessor_config.json").write_text(json.dumps({"do_resize": False}))
    (out / "README.md").write_text("a model card: not a model file\n")
    return out


def _init(cli, tmp_path: Path, model: Path, *extra: str):
    return cli("init", "led", "--unsigned", "--workload", "transformers", "--weights", str(model), *SMALL,
               *extra, cwd=tmp_path)


def test_an_instruct_models_files_are_kept_pinned_exported_and_answer_apply_chat_template(tmp_path, instruct_dir, cli):
    from transformers import AutoTokenizer

    r = _init(cli, tmp_path, instruct_dir)
    assert r.returncode == 0, r.stderr
    assert "left out of the ledger" in r.stderr and "README.md" in r.stderr  # init names what it leaves out
    files = Ledger.open(tmp_path / "led").config.workload.params["files"]
    needed = {"chat_template.jinja", "special_tokens_map.json", "added_tokens.json", "merges.txt",
              "preprocessor_config.json", "tokenizer_config.json", "generation_config.json"}
    assert needed <= set(files), sorted(files)
    assert "README.md" not in files
    r = cli("export", "0", str(tmp_path / "out"), cwd=tmp_path / "led")
    assert r.returncode == 0, r.stderr
    assert "woolf-export.json" in r.stdout  # the export lists every file it wrote (item 11)
    out = tmp_path / "out"
    assert needed <= {p.name for p in out.iterdir()}
    want = AutoTokenizer.from_pretrained(instruct_dir).apply_chat_template(CHAT, tokenize=False)
    got = AutoTokenizer.from_pretrained(out).apply_chat_template(CHAT, tokenize=False)
    assert got == want and "<|assistant|>hi there" in got


def test_a_pinned_chat_template_that_changes_is_refused(tmp_path, instruct_dir, cli):
    from woolf.errors import IntegrityError

    assert _init(cli, tmp_path, instruct_dir).returncode == 0
    led = Ledger.open(tmp_path / "led")
    (led.root / "ledger/model/chat_template.jinja").write_text("{{ 'pwned' }}")
    wl = led.config.workload
    from woolf.workloads.hf import Transformers

    t = Transformers(**wl.params)
    with pytest.raises(IntegrityError, match="chat_template.jinja does not match its sha256"):
        t.bind(lambda rel: (led.root / rel).read_bytes() if (led.root / rel).is_file() else None)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "preprocessor_config.json", "generation_config.json"])
def test_a_model_file_that_loads_code_is_refused(tmp_path, instruct_dir, name, cli):
    bad = Path(shutil.copytree(instruct_dir, tmp_path / "bad"))
    raw = json.loads((bad / name).read_text()) if (bad / name).is_file() else {}
    (bad / name).write_text(json.dumps({**raw, "auto_map": {"AutoTokenizer": ["evil.Tok", None]}}))
    r = _init(cli, tmp_path, bad)
    assert r.returncode == 2 and "'auto_map' loads code" in r.stderr and name in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "led").exists()


@pytest.mark.unit
def test_a_file_name_that_is_not_a_model_file_is_refused():
    from woolf.errors import ConfigError
    from woolf.workloads.hf import Transformers

    sha = "0" * 64
    for odd in ("../../etc/passwd", "/abs.json", "additional_chat_templates/../x"):
        with pytest.raises(ConfigError, match="not a model file name"):
            Transformers(files={"config.json": sha, "tokenizer.json": sha, odd: sha})


def test_a_sentence_encoder_is_refused_as_an_encoder_not_a_causal_lm(tmp_path):
    """Item 3: a BertModel checkpoint fits its config; it was blamed on a config mismatch."""
    import torch
    from transformers import BertConfig, BertModel

    from woolf.protocol.config import LimitsConfig
    from woolf.workloads.hf.modeldir import import_model_dir

    out = tmp_path / "encoder"
    tok = tiny.make_tokenizer(128)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)).save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    with pytest.raises(UsageError) as err:
        import_model_dir(out, LimitsConfig())
    text = str(err.value) + " " + (err.value.hint or "")
    assert "encoder" in text and "not a causal language model" in text, text
    assert "same save_pretrained" not in text
    assert "ForCausalLM" in text  # what would work


def test_an_export_follows_the_users_umask(tmp_path, instruct_dir, cli):
    """Item 10: the directory was 0700 (mkdtemp), unlike save_pretrained's."""
    assert _init(cli, tmp_path, instruct_dir).returncode == 0
    old = os.umask(0o022)
    try:
        from woolf.ledger.export import export_version

        export_version(Ledger.open(tmp_path / "led"), 0, tmp_path / "out")
    finally:
        os.umask(old)
    out = tmp_path / "out"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    for p in out.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p.name


def test_the_report_of_a_transformers_ledger_says_per_token_and_draws_no_reference_lines(tmp_path, instruct_dir,
                                                                                         cli):
    """Item 9: the loss axis said nats/byte for a per-token loss; the caption named reference lines
    that only a demo's report draws."""
    from tests.conftest import git
    from woolf.hub.create import init_hub
    from woolf.report.build import build_report

    assert _init(cli, tmp_path, instruct_dir).returncode == 0
    init_hub(tmp_path / "hub.git", tmp_path / "led")
    git("clone", "-q", str(tmp_path / "hub.git"), str(tmp_path / "mine"), cwd=tmp_path)  # a hub clone's report
    page = build_report(Ledger.open(tmp_path / "mine"), tmp_path / "report")["html"].read_text()
    assert "Benchmark loss (nats/token) of every merged version" in page
    assert "reference" not in page and "nats/byte" not in page


def test_transformers_optimizer_warmup_is_checked():
    from woolf.errors import ConfigError
    from woolf.workloads.hf import Transformers

    sha = "0" * 64
    with pytest.raises(ConfigError, match="optimizer_warmup"):
        Transformers(files={"config.json": sha, "tokenizer.json": sha}, optimizer_warmup=-1)
    assert Transformers(files={"config.json": sha, "tokenizer.json": sha}, optimizer_warmup=60).opt_factor(0) == 1 / 60


# A model directory woolf cannot read is named for what it is: a GGUF one.

@pytest.mark.parametrize("as_file", [False, True])
def test_a_gguf_checkpoint_is_diagnosed_as_gguf_with_its_conversion(tmp_path, cli, as_file):
    d = tmp_path / "smol-gguf"
    d.mkdir()
    (d / "smollm2-135m-instruct-q8_0.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
    (d / "convert_hf_to_gguf.py").write_text("print('a conversion script shipped beside it')\n")
    (d / "README.md").write_text("a model card\n")
    weights = d / "smollm2-135m-instruct-q8_0.gguf" if as_file else d
    r = cli("init", "led", "--unsigned", "--workload", "transformers", "--weights", str(weights), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "holds a GGUF checkpoint (smollm2-135m-instruct-q8_0.gguf)" in r.stderr, r.stderr
    assert "Python code" not in r.stderr and "gguf_file='smollm2-135m-instruct-q8_0.gguf'" in r.stderr
    assert not (tmp_path / "led").exists()
