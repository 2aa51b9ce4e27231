"""`woolf init` raises limits.max_delta_bytes to fit a dense delta of the model (the 2 GiB default refused a 2B model's)."""

from __future__ import annotations

import pytest
import torch

from woolf.ledger.create import CreateOptions, delta_bytes_needed
from woolf.ledger.ledger import Ledger
from woolf.protocol.config import LimitsConfig

MiB = 1 << 20


@pytest.mark.unit
def test_the_limit_a_model_needs():
    two_b = {f"w{i}": torch.empty(31_250_000, device="meta") for i in range(64)}  # 2B float32, no memory
    need = delta_bytes_needed(two_b)
    assert need == 8_000_000_000 + MiB + (-(8_000_000_000 + MiB) % MiB) and need % MiB == 0
    assert need > LimitsConfig().max_delta_bytes  # the default refuses it: init must raise the limit
    assert delta_bytes_needed({"w": torch.empty(10)}) == 2 * MiB  # 40 bytes + 1 MiB of header, in MiB


def test_init_keeps_the_default_for_a_small_model_and_an_explicit_limit_as_given(tmp_path):
    small = Ledger.init(tmp_path / "a", CreateOptions(storage=str(tmp_path / "sa"), workload="synthetic",
                        overrides={"workload.params.n_params": "1000"}))
    assert small.config.limits.max_delta_bytes == LimitsConfig().max_delta_bytes
    given = Ledger.init(tmp_path / "b", CreateOptions(storage=str(tmp_path / "sb"), workload="synthetic",
                        overrides={"workload.params.n_params": "1000", "limits.max_delta_bytes": "1000"}))
    assert given.config.limits.max_delta_bytes == 1000


CHAT = "".join(f"<|user|>What does {n} like?\n<|assistant|>{n} likes the {f}.\n"
               for n in ("Ana", "Bo", "Cy", "Dee") for f in ("fig", "plum", "kiwi", "lime", "pear")) * 3


def test_init_benchmark_file_is_the_gate_of_a_charlm_ledger(tmp_path, cli):
    """`woolf init --benchmark FILE`: the ledger's public benchmark, and so the gate, is the user's own text."""
    from tests.conftest import git
    from woolf.hub import init_hub
    from woolf.participant import SubmitOptions, TrainOptions, submit, train
    from woolf.validator import Validator

    (tmp_path / "chat.txt").write_text(CHAT)
    r = cli("init", "led", "--unsigned", "--benchmark", "chat.txt", "--set", "workload.steps=3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the gate is the public benchmark chat.txt, copied to ledger/benchmark/" in r.stdout
    led = Ledger.open(tmp_path / "led")
    assert led.benchmark() == CHAT.encode()
    wl = led.workload()
    genesis = led.load_weights(led.show(0))
    assert led.show(0).metrics == wl.evaluate(genesis, CHAT.encode())
    assert led.show(0).metrics != wl.evaluate(genesis, wl.benchmark_bytes())
    init_hub(tmp_path / "hub.git", led.root)
    for name in ("alice", "val"):
        git("clone", "-q", str(tmp_path / "hub.git"), name, cwd=tmp_path)
    alice, val = Ledger.open(tmp_path / "alice"), Ledger.open(tmp_path / "val")
    train(alice, TrainOptions(contributor="alice", device="cpu"))
    submit(alice, SubmitOptions(contributor="alice"))
    (v,) = Validator(val, device="cpu").run()
    assert v.metrics["before"] == led.show(0).metrics  # the gate scored the PR on chat.txt


@pytest.mark.parametrize("content, says", [(b"", "the file is empty"), (b"\xff\xfe\x00binary", "not UTF-8 text"),
                                            (b"too short", "less than one window")])
def test_init_refuses_a_benchmark_file_that_cannot_gate(tmp_path, cli, content, says):
    (tmp_path / "b.txt").write_bytes(content)
    r = cli("init", "led", "--unsigned", "--benchmark", "b.txt", cwd=tmp_path)
    assert r.returncode != 0 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "led").exists()


def test_init_benchmark_file_is_the_gate_of_a_transformers_ledger(tmp_path, cli):
    pytest.importorskip("transformers")
    from tests.workloads.test_hf import tiny

    model = tiny.make_tiny_model(tmp_path / "m", arch="llama", dtype="bfloat16")
    (tmp_path / "chat.txt").write_text(CHAT)
    r = cli("init", "led", "--unsigned", "--workload", "transformers", "--weights", str(model),
            "--benchmark", "chat.txt", "--set", "workload.params.context=32", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the ledger keeps float32 master weights of your bfloat16 checkpoint" in r.stdout  # said at init
    led = Ledger.open(tmp_path / "led")
    assert led.benchmark() == CHAT.encode()
    wl = led.workload()
    assert led.show(0).metrics == wl.evaluate(led.load_weights(led.show(0)), CHAT.encode())
