"""A participant's LoRA contribution (woolf/participant/lora.py): the factor file `train` wrote is the PR's delta."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from woolf.errors import InvalidWeightsError  # noqa: E402
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
