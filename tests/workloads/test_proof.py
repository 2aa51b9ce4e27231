"""The proof hook in a workload's training loop (woolf/workloads/proof.py): a run commits to its path, and
each segment replays bit for bit from its served state, in this process or another; a changed state or
another thread count does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from woolf.errors import Rejected
from woolf.protocol.proof import COMPONENTS, EMPTY, segment_digest, state_digest
from woolf.workloads.charlm import CharLM
from woolf.workloads.proof import Recorder, Replay, StartCheck, Stop, device_class

pytestmark = pytest.mark.unit


def _small() -> CharLM:
    return CharLM(d_model=32, n_layer=1, context=32, batch_size=8, benchmark_bytes=4096, shard_files=2)


def _record(tmp_path: Path, steps: int = 12, every: int = 4):
    wl = _small()
    w0, data = wl.genesis(0), wl.default_data("alice", 0)
    rec = Recorder(every=every, keep=tmp_path / "keep")
    out, _ = wl.train(w0, data, steps, seed=3, proof=rec)
    return wl, w0, data, rec, out


def _replay(wl, w0, data, rec, i: int, state=None, steps: int = 12) -> Replay:
    state = state if state is not None else load_file(rec.keep / rec.kept[i])
    rep = Replay(state, rec.at[i], rec.at[i + 1], keep_end=True)
    wl.train(w0, data, steps, seed=3, proof=rep)
    return rep


def test_every_segment_replays_bit_for_bit_from_its_kept_state(tmp_path):
    wl, w0, data, rec, out = _record(tmp_path)
    assert rec.at == [0, 4, 8, 12] and len(rec.links) == 4 and set(rec.kept) == {0, 1, 2, 3}
    assert rec.components[0]["opt"] == EMPTY  # a fresh AdamW holds nothing before its first step
    for i in range(3):
        rep = _replay(wl, w0, data, rec, i)
        assert state_digest(rep.end) == rec.links[i + 1][0]
        assert segment_digest(rep.fingerprints) == rec.links[i + 1][1]
        assert rep.fingerprints == rec.segment_fingerprints(i + 1)
    assert all(torch.equal(rep.end_state[f"params/{k}"], out[k]) for k in out)  # the last replay ends at the weights


def test_a_changed_state_shows_at_the_segments_first_step(tmp_path):
    wl, w0, data, rec, _ = _record(tmp_path)
    state = load_file(rec.keep / rec.kept[1])
    state["params/head.weight"][0, 0] += 1e-3
    rep = _replay(wl, w0, data, rec, 1, state)
    assert state_digest(rep.end) != rec.links[2][0]
    assert rep.fingerprints[0] != rec.segment_fingerprints(2)[0]  # the loss of step 5 already differs


def test_a_state_of_another_model_is_refused(tmp_path):
    wl, w0, data, rec, _ = _record(tmp_path)
    state = load_file(rec.keep / rec.kept[0])
    del state["params/head.weight"]
    with pytest.raises(Rejected, match="does not fit the model"):
        _replay(wl, w0, data, rec, 0, state)
    state = load_file(rec.keep / rec.kept[0])
    state["data"] = torch.zeros(3)
    with pytest.raises(Rejected, match="'data'"):
        _replay(wl, w0, data, rec, 0, state)


def test_the_start_check_digests_step_0_without_training(tmp_path):
    wl, w0, data, rec, _ = _record(tmp_path)
    check = StartCheck()
    with pytest.raises(Stop):
        wl.train(w0, data, 12, seed=3, proof=check)
    assert check.start["params"] == rec.components[0]["params"] and check.start["opt"] == EMPTY
    assert set(check.start) == set(COMPONENTS)


def test_another_process_replays_the_same_bits(tmp_path):
    wl, w0, data, rec, _ = _record(tmp_path)
    (tmp_path / "chain.json").write_text(json.dumps({"at": rec.at, "links": rec.links}))
    code = f"""
import json, sys, torch
from safetensors.torch import load_file
from woolf.workloads.charlm import CharLM
from woolf.workloads.proof import Replay
from woolf.protocol.proof import state_digest
torch.set_num_threads({torch.get_num_threads()})
chain = json.load(open(sys.argv[1] + "/chain.json"))
wl = CharLM(d_model=32, n_layer=1, context=32, batch_size=8, benchmark_bytes=4096, shard_files=2)
rep = Replay(load_file(sys.argv[1] + "/keep/link-0001.safetensors"), 4, 8)
wl.train(wl.genesis(0), wl.default_data("alice", 0), 12, seed=3, proof=rep)
print(state_digest(rep.end) == chain["links"][2][0])
"""
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr[-2000:]


def test_the_device_class_names_what_a_bit_exact_replay_needs():
    c = device_class("cpu")
    assert c["device"] == "cpu" and c["capability"] and c["threads"] == torch.get_num_threads()
    assert c["torch"] == torch.__version__.split("+")[0] and c["autocast"] == "off"
