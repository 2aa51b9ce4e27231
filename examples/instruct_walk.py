"""A group fine-tunes a small instruct model with LoRA on its own Q&A, end to end with the real `woolf` CLI.

Usage:
    nice -n 10 .venv/bin/python examples/instruct_walk.py              # 131-290 s seen on 2 shared CPU cores
    nice -n 10 .venv/bin/python examples/instruct_walk.py --keep /tmp/walk --json

Nothing is downloaded. The walk:

1. builds a small Llama-shaped "instruct" model from scratch: a byte-level BPE tokenizer trained with
   `tokenizers` on the Python standard library's docstrings and the Zen of Python, a ChatML chat template,
   and a short plain-torch pre-training on those docstrings plus ~2,500 chat turns made from them
   ("What does textwrap.dedent do?" -> the docstring's first sentence). It is honest about its size: about
   half a million parameters, it has learnt the turn format and docstring English, not knowledge;
2. writes the group's Q&A file (chat turns about a fictional kettle), split into alice's and bob's training
   shares and a held-out set of paraphrased questions on the same facts;
3. runs `woolf key create`, `woolf init --workload transformers --weights MODEL --benchmark HELDOUT`,
   `woolf hub init`, two participants in turn `woolf train --lora r=16 --data THEIR_SHARE` and `woolf submit`,
   each merged by a validator's `woolf validate`, then that clone's `woolf export` of every version: each command its own
   process in its own clone;
4. loads the original model and the export with transformers, greedy-generates answers to training prompts
   through the chat template, and measures the loss on the held-out Q&A (the gate's benchmark) before and
   after, both as the ledger recorded it and recomputed from the exported directory.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

END, START, STOP = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = ("{% for m in messages %}" + START + "{{ m['role'] }}\n{{ m['content'] }}" + STOP + "\n"
                 "{% endfor %}{% if add_generation_prompt %}" + START + "assistant\n{% endif %}")

# The group's own Q&A: facts about a product that does not exist, so no pre-training could know them.
TRAIN_QA = [
    ("What is the Brindle kettle?", "The Brindle is a cordless travel kettle made by Tarnwick Works."),
    ("Who makes the Brindle kettle?", "Tarnwick Works makes the Brindle kettle in Leeds."),
    ("How much water does the Brindle hold?", "The Brindle holds 0.6 litres of water."),
    ("What colour is the Brindle?", "The Brindle comes in slate green only."),
    ("How long does the Brindle take to boil?", "The Brindle boils a full tank in four minutes."),
    ("What does the amber light on the Brindle mean?", "The amber light means the Brindle needs descaling."),
    ("How do I descale the Brindle?", "Fill the Brindle with vinegar and water, boil it, then rinse twice."),
    ("What is the Brindle's warranty?", "The Brindle has a three year warranty from Tarnwick Works."),
    ("Does the Brindle work abroad?", "Yes, the Brindle works on 110 to 240 volts."),
    ("How heavy is the Brindle?", "The Brindle weighs 480 grams when empty."),
    ("Can the Brindle keep water warm?", "No, the Brindle switches off as soon as the water boils."),
    ("What is the Brindle's lid made of?", "The Brindle's lid is made of bamboo."),
    ("How do I open the Brindle?", "Press the bamboo lid down and turn it a quarter to the left."),
    ("Why does the Brindle beep three times?", "Three beeps mean the Brindle is empty and has turned off."),
    ("Can I put the Brindle in a dishwasher?", "No, wipe the Brindle by hand; a dishwasher ruins the seal."),
    ("Where is the Brindle's filter?", "The filter sits behind the spout and lifts out for rinsing."),
    ("What is inside the Brindle box?", "The box holds the Brindle, a charging base and a cotton pouch."),
    ("How much does the Brindle cost?", "The Brindle costs 49 pounds."),
    ("How do I charge the Brindle?", "Set the Brindle on its base for two hours to charge it fully."),
    ("How many boils does a charge last?", "One charge lasts six boils."),
    ("What does the green light mean?", "The green light means the Brindle is charged and ready."),
    ("Is the Brindle safe for children?", "Keep the Brindle away from children; its spout gets hot."),
    ("How do I reset the Brindle?", "Hold the switch for ten seconds until the light blinks white."),
    ("Who do I call about a broken Brindle?", "Call Tarnwick Works on their help line, open nine to five."),
]
HELDOUT_QA = [  # the same facts asked another way: the group's own benchmark, never trained on
    ("Which company builds the Brindle?", "Tarnwick Works builds the Brindle kettle in Leeds."),
    ("What is the capacity of the Brindle?", "The Brindle has a capacity of 0.6 litres."),
    ("Which colours does the Brindle come in?", "The Brindle is sold in slate green only."),
    ("How quickly does the Brindle boil?", "It boils a full tank in four minutes."),
    ("The amber light on my Brindle is on. Why?", "The amber light says the Brindle needs descaling."),
    ("How long is the Brindle guaranteed?", "Tarnwick Works gives the Brindle a three year warranty."),
    ("What does the Brindle weigh?", "The Brindle weighs 480 grams empty."),
    ("What material is the Brindle's lid?", "The lid of the Brindle is bamboo."),
    ("My Brindle beeped three times. What happened?", "It ran empty, so the Brindle turned itself off."),
    ("What is the price of the Brindle?", "The Brindle is priced at 49 pounds."),
    ("How many times can the Brindle boil on one charge?", "The Brindle boils six times on one charge."),
    ("How do I clean the Brindle?", "Wipe the Brindle by hand; never put it in a dishwasher."),
]
SHOW = [0, 2, 5, 17]  # training prompts whose answers are shown before and after
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # every Llama linear layer


# -- 1. the model ---------------------------------------------------------------------------------------------


def docstrings() -> tuple[list[str], list[tuple[str, str]]]:
    """Every docstring of the standard library's top-level modules, and (question, answer) turns made of them."""
    import codecs

    root = Path(sysconfig.get_paths()["stdlib"])
    zen = (root / "this.py").read_text()
    texts = [codecs.decode(zen.split('"""')[1], "rot13")]
    pairs = []
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            texts.append(doc)
            if isinstance(node, ast.Module) or node.name.startswith("_"):
                continue
            first = " ".join(doc.split("\n\n")[0].split())
            if 20 <= len(first) <= 200:
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                pairs.append((f"What does the {kind} {path.stem}.{node.name} do?", first))
    return texts, pairs


def make_tokenizer(texts: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[END, START, STOP], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def chat(tokenizer, q: str, a: str | None = None) -> str:
    """One turn as the chat template writes it: the prompt alone (a = None) or the whole exchange."""
    messages = [{"role": "user", "content": q}] + ([{"role": "assistant", "content": a}] if a else [])
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=a is None)


def pretrain(model, ids, steps: int, batch: int, context: int, lr: float, log) -> list[float]:
    """A plain torch loop: AdamW with a cosine schedule over random windows of ``ids``."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    model.train()
    losses = []
    for step in range(steps):
        ix = torch.randint(len(ids) - context - 1, (batch,), generator=gen)
        x = torch.stack([ids[i: i + context] for i in ix])
        y = torch.stack([ids[i + 1: i + 1 + context] for i in ix])
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if (step + 1) % 100 == 0:
            log(f"  pre-training step {step + 1}/{steps}: loss {sum(losses[-100:]) / 100:.3f}")
    return losses


def make_instruct_model(out: Path, steps: int, log, vocab: int = 1024, width: int = 128, layers: int = 2) -> dict:
    """A Llama-shaped chat model saved as save_pretrained writes one: weights, tokenizer, chat template."""
    import random

    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    t0 = time.time()
    texts, pairs = docstrings()
    tok = make_tokenizer(texts, vocab)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=STOP, pad_token=END)
    tokenizer.chat_template = CHAT_TEMPLATE
    end = tok.token_to_id(END)
    random.Random(0).shuffle(pairs)
    # docstrings as plain text, then the chat turns: the model learns English first, and that an answer ends
    corpus = [t + END for t in texts] + [chat(tokenizer, q, a) for q, a in pairs]
    random.Random(1).shuffle(corpus)
    ids = torch.tensor(tok.encode("".join(corpus)).ids, dtype=torch.long)
    config = LlamaConfig(num_hidden_layers=layers, hidden_size=width, num_attention_heads=4, num_key_value_heads=4,
                         intermediate_size=3 * width, vocab_size=tok.get_vocab_size(), max_position_embeddings=256,
                         bos_token_id=end, eos_token_id=end, pad_token_id=end, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: Llama, {layers} layers x {width}, {n_params:,} parameters; vocabulary {tok.get_vocab_size()}; "
        f"pre-training on {len(ids):,} tokens ({len(texts)} docstrings, {len(pairs)} chat turns)")
    losses = pretrain(model, ids, steps, batch=8, context=64, lr=3e-3, log=log)
    model.generation_config = GenerationConfig(eos_token_id=[tok.token_to_id(STOP), end], pad_token_id=end,
                                               bos_token_id=end)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"parameters": n_params, "tokens": len(ids), "steps": steps,
            "final_loss": round(sum(losses[-50:]) / min(50, len(losses)), 4), "seconds": round(time.time() - t0, 1)}


# -- 3. the ledger ----------------------------------------------------------------------------------------------


def woolf(log, cwd: Path, *args: str, env: dict | None = None) -> str:
    """One `woolf` command as a user types it, in its own process; its output is shown and returned."""
    t0 = time.time()
    cmd = [sys.executable, "-m", "woolf", *args]
    env = {"OMP_NUM_THREADS": "1", **os.environ, **(env or {})}  # a small model: one thread each, no contention
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    shown = f"$ (cd {cwd.name}) woolf {' '.join(args)}   [{time.time() - t0:.0f} s]"
    log(shown + "\n" + "\n".join("    " + line for line in (done.stdout + done.stderr).strip().splitlines()))
    if done.returncode:
        raise SystemExit(f"`woolf {' '.join(args)}` failed with exit status {done.returncode}")
    return done.stdout


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def walk_ledger(root: Path, model: Path, shares: dict[str, Path], heldout: Path, steps: int, lr: str,
                lora: str, log) -> dict:
    """init -> hub -> each participant in turn trains LoRA on its share from the newest version and submits,
    and the validator merges it -> export. (Two PRs from the same version: the second is stale, merged at
    half scale on top of the first, and the gate judges that, not what its author measured.)"""
    key = str(root / "keys/group")
    woolf(log, root, "key", "create", "--out", "keys/group", "--name", "group")
    woolf(log, root, "init", "ledger", "--key", "keys/group", "--workload", "transformers", "--weights", str(model),
          "--benchmark", str(heldout), "--set", f"workload.steps={steps}", "--set", f"workload.params.lr={lr}",
          "--set", "workload.params.context=64", "--set", "policy.min_improvement=0")
    woolf(log, root, "hub", "init", "hub.git", "--from", "ledger")
    git(root / "ledger", "remote", "add", "origin", str(root / "hub.git"))
    git(root, "clone", "-q", "hub.git", "validator")
    for who, share in shares.items():
        git(root, "clone", "-q", "hub.git", who)
        git(root / who, "config", "user.name", who)
        git(root / who, "config", "user.email", f"{who}@example.org")
        woolf(log, root / who, "train", "--lora", lora, "--data", str(share), "--device", "cpu")
        woolf(log, root / who, "submit", "-m", f"{who}'s half of the Q&A")
        woolf(log, root / "validator", "validate", "--device", "cpu", env={"WOOLF_SIGNING_KEY": key})
    versions = json.loads(woolf(log, root / "validator", "log", "--json"))
    newest = max(v["version"] for v in versions)  # this clone's log and export read origin/main: no pull needed
    for version in range(1, newest + 1):
        woolf(log, root / "validator", "export", str(version), str(root / f"exported-v{version}"))
    return {"newest": newest, "loss": {v["version"]: round(v["metrics"]["loss"], 4) for v in versions}}


# -- 4. before and after ------------------------------------------------------------------------------------


def answer(model, tokenizer, question: str, max_new_tokens: int = 40) -> str:
    import torch

    ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(input_ids=ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()


def heldout_loss(model, tokenizer, text: str, context: int = 64) -> float:
    """The benchmark's loss as the workload computes it (hf/evaluation.py): the text's tokens and the end-of-text
    token, cut into non-overlapping windows of ``context``; recomputed here from a loaded directory."""
    import torch
    import torch.nn.functional as F

    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [model.config.eos_token_id]
    ids = torch.tensor(ids)
    n = (len(ids) - 1) // context
    x, y = ids[: n * context].view(n, context), ids[1: n * context + 1].view(n, context)
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1)).item()


def compare(dirs: dict[str, Path], heldout_text: str) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = {}
    for label, path in dirs.items():
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        out[label] = {"answers": {TRAIN_QA[i][0]: answer(model, tokenizer, TRAIN_QA[i][0]) for i in SHOW},
                      "heldout_answers": {q: answer(model, tokenizer, q) for q, _ in HELDOUT_QA[:2]},
                      "heldout_loss": round(heldout_loss(model, tokenizer, heldout_text), 4),
                      "dtype": str(next(model.parameters()).dtype).replace("torch.", "")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="work in this (new or empty) directory and keep it")
    ap.add_argument("--pretrain-steps", type=int, default=500)
    ap.add_argument("--steps", type=int, default=100, help="LoRA steps per contribution (workload.steps)")
    ap.add_argument("--lr", default="0.005", help="workload.params.lr of the ledger")
    ap.add_argument("--lora", default="r=16,targets=" + "+".join(LINEAR))
    ap.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)  # a small model on a shared machine: one thread wastes nothing on contention
    t0 = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t0:5.0f} s] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="instruct-walk-") as tmp:
        root = a.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        if any(root.iterdir()):
            raise SystemExit(f"{root} is not empty")
        root = root.resolve()
        built = make_instruct_model(root / "model", a.pretrain_steps, log)
        log(f"built the instruct model in {built['seconds']} s: pre-training loss {built['final_loss']}")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(root / "model")
        data = root / "qa"  # the group's Q&A, rendered through the model's own chat template
        data.mkdir()
        shares = {"alice": data / "alice.txt", "bob": data / "bob.txt"}
        for i, path in enumerate(shares.values()):
            path.write_text("".join(chat(tokenizer, q, ans) for q, ans in TRAIN_QA[i::2]))
        heldout = data / "heldout.txt"
        heldout.write_text("".join(chat(tokenizer, q, ans) for q, ans in HELDOUT_QA))
        ledger = walk_ledger(root, root / "model", shares, heldout, a.steps, a.lr, a.lora, log)
        dirs = {"before": root / "model", **{f"version {v}": root / f"exported-v{v}" for v in range(1, ledger["newest"] + 1)}}
        result = {"model": built, "ledger": ledger, **compare(dirs, heldout.read_text())}
        for i, label in enumerate(dirs):
            r = result[label]
            log(f"{label} ({r['dtype']}): held-out Q&A loss {r['heldout_loss']} from the directory; "
                f"the ledger recorded {ledger['loss'][i]} for version {i}")
            for q, ans in {**r["answers"], **r["heldout_answers"]}.items():
                log(f"  {q!r} -> {ans!r}")
        log(f"done in {time.time() - t0:.0f} s")
        if a.json:
            print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
