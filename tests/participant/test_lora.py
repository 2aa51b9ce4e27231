"""A participant's LoRA contribution (woolf/participant/lora.py): the factor file `train` wrote is the PR's delta."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from tests.conftest import make_network  # noqa: E402
from woolf.errors import InvalidWeightsError, UsageError  # noqa: E402
from woolf.participant import SubmitOptions, TrainOptions, submit, train  # noqa: E402
from woolf.participant.state import work_dir  # noqa: E402
from woolf.protocol import layout  # noqa: E402
from woolf.storage.files import hashes_of_file  # noqa: E402
from woolf.storage.weights import save_atomic  # noqa: E402

ACCEPT = {"delta.accept": '["dense", "topk", "lora"]'}


def test_submit_sends_the_factor_file_train_wrote_and_checks_the_bytes_it_sends(make_net):
    net = make_net(**ACCEPT)
    alice = net.clone("alice")
    train(alice, TrainOptions(steps=2, contributor="alice", device="cpu", lora="r=2"))
    factors = work_dir(alice) / "lora.safetensors"
    good = factors.read_bytes()
    # the participant's own file turned bad after train (all-zero factors): refused when it is sent,
    # one line, and nothing is left in the outgoing area
    from safetensors.torch import load_file

    zeros = {k: (v if k.endswith("lora_scale") else torch.zeros_like(v)) for k, v in load_file(str(factors)).items()}
    save_atomic(zeros, factors)
    with pytest.raises(InvalidWeightsError, match="every factor pair is zero"):
        submit(alice, SubmitOptions(contributor="alice"))
    assert not list((alice.root / layout.WORK / "outgoing").glob("*.safetensors"))
    factors.write_bytes(good)
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert pr["delta_kind"] == "lora" and pr["delta_sha256"] == hashes_of_file(factors)[1]  # the same bytes
    assert factors.read_bytes() == good  # still there, untouched


def test_carried_adapters_are_kept_privately_recorded_in_the_recipe_and_refused_from_elsewhere(make_net, tmp_path):
    from woolf.participant.lora_state import ADAPTERS, START
    from woolf.participant.state import state_dir

    net = make_net(**ACCEPT)
    alice = net.clone("alice")
    first = train(alice, TrainOptions(steps=2, contributor="alice", device="cpu", lora="r=2,carry=1"))
    assert first["recipe"]["optimizer"] == {"start": "fresh"} and "carry=1" in first["recipe"]["lora"]
    kept = state_dir(alice) / ADAPTERS
    assert kept.is_file() and not (work_dir(alice) / START).exists()
    carried_bytes = kept.read_bytes()
    second = train(alice, TrainOptions(steps=2, contributor="alice", device="cpu", lora="r=2,carry=1", seed=1))
    opt = second["recipe"]["optimizer"]
    start = work_dir(alice) / START
    assert opt["start"] == "carried" and opt["kind"] == "lora-adapters" and start.read_bytes() == carried_bytes
    assert (opt["md5"], opt["sha256"]) == hashes_of_file(start) and opt["size"] == len(carried_bytes)
    assert second["training"]["optimizer"] == "carried (lora, step 2)"
    pr = submit(alice, SubmitOptions(contributor="alice"))
    assert pr["delta_kind"] == "lora"

    # another rank, or another ledger's state: one line, nothing changes
    before = kept.read_bytes(), (work_dir(alice) / "trained.json").read_bytes()
    with pytest.raises(UsageError, match=r"--lora r=4,alpha=8,carry=1: the carried LoRA adapters .* are rank 2") as err:
        train(alice, TrainOptions(steps=1, contributor="alice", device="cpu", lora="r=4,carry=1"))
    assert "\n" not in err.value.message and "--fresh" in err.value.hint
    other = make_network(tmp_path / "other", **ACCEPT).clone("bob")
    state_dir(other).mkdir(parents=True, exist_ok=True)
    (state_dir(other) / ADAPTERS).write_bytes(carried_bytes)
    with pytest.raises(UsageError, match="are another ledger's"):
        train(other, TrainOptions(steps=1, contributor="bob", device="cpu", lora="r=2,carry=1"))
    assert (kept.read_bytes(), (work_dir(alice) / "trained.json").read_bytes()) == before
    # --fresh discards it: fresh adapters again
    again = train(alice, TrainOptions(steps=1, contributor="alice", device="cpu", lora="r=4,carry=1", fresh=True))
    assert again["recipe"]["optimizer"] == {"start": "fresh"}
