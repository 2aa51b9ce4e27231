"""LoRA contributions end to end (issue 33): `woolf train --lora r=4` -> submit -> validate -> audit, and every check.

A tiny local GPT-2 (examples/make_tiny_model.py): nothing is downloaded.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("peft")

from tests.workloads.hf.test_workload import gpt2_dir, hf_network, tiny  # noqa: E402,F401 - the module's fixture
from woolf.audit.recompute import audit  # noqa: E402
from woolf.core.lora import rank_of  # noqa: E402
from woolf.errors import UsageError  # noqa: E402
from woolf.forges import forge_for  # noqa: E402
from woolf.ledger.retention.gc import collect  # noqa: E402
from woolf.ledger.submission import SubmitDeltaOptions, submit_delta  # noqa: E402
from woolf.participant import SubmitOptions, TrainOptions, submit, train  # noqa: E402
from woolf.participant.state import work_dir  # noqa: E402
from woolf.storage.kinds.lora_file import LoraFile, LoraTensors, dense_bytes  # noqa: E402
from woolf.storage.weights import read_spec, spec_of  # noqa: E402
from woolf.validator import Validator  # noqa: E402


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory):
    """GPT-2 of width 128: r = 4 factors are under 1% of its dense delta (width 32 would be 12%)."""
    return tiny.make_tiny_model(tmp_path_factory.mktemp("models") / "wide", width=128, heads=4)


def _factors(ledger) -> dict:
    """The factors `train --lora` left in the work area."""
    spec = spec_of(ledger.load_weights(ledger.show(0)))
    d = LoraTensors.open(work_dir(ledger) / "lora.safetensors", ledger.config.limits, expect=spec)
    return {t: (A, B, s) for t, A, B, s in d.factor_pairs()}


def _send(ledger, who, factors, base_version=0, raw=None) -> dict:
    ledger.pull()
    base = ledger.show(base_version)
    spec = spec_of(ledger.load_weights(base))
    f = LoraFile(factors, spec, 1 << 20)
    if raw is not None:  # bytes no honest client writes: straight to the file
        f.tensors = raw
    return submit_delta(ledger, f, base, SubmitDeltaOptions(who=who, the_forge=forge_for(ledger, None)))


def _open_expansions(directory) -> list[str]:
    """This process's open files that are unnamed (deleted or O_TMPFILE) in ``directory``."""
    fds = "/proc/self/fd"
    found = []
    for fd in os.listdir(fds):
        try:
            target = os.readlink(f"{fds}/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)) and ("(deleted)" in target or "/#" in target):
            found.append(target)
    return found


def test_lora_train_submit_validate_audit_rebuild_and_every_check(tmp_path, wide_dir, monkeypatch):
    net = hf_network(tmp_path, wide_dir, **{"storage.snapshot_every": "50", "scoring.uniqueness": "off"})
    assert "lora" in net.work.config.delta.accept  # `woolf init --workload transformers` accepts it
    alice, bob, val = net.clone("alice"), net.clone("bob"), net.clone("val")
    trained = train(alice, TrainOptions(steps=4, contributor="alice", device="cpu", lora="r=4,targets=c_attn+c_fc"))
    assert trained["lora"] == "r=4,alpha=8,targets=c_attn+c_fc"
    assert trained["training"]["lora"]["targets"] == 4  # 2 layers x (c_attn, c_fc)
    factors = _factors(alice)
    a = submit(alice, SubmitOptions(contributor="alice"))
    assert a["delta_kind"] == "lora"
    v0 = val.load_weights(val.show(0))
    assert a["delta_size"] <= 0.05 * dense_bytes(spec_of(v0))  # factors, never a dense product

    # bob copies alice's factors rescaled (A*c, B/c): the same product, other bytes
    rescaled = {t: (A * 3.0, B / 3.0, s) for t, (A, B, s) in factors.items()}
    b = _send(bob, "bob", rescaled)
    expanded, expand_once = [], LoraTensors.expand_once  # each PR's product: expanded once, then read back
    monkeypatch.setattr(LoraTensors, "expand_once", lambda self, d: expanded.append(d) or expand_once(self, d))
    verdicts = Validator(val, device="cpu").run()
    by = {v.id: v for v in verdicts}
    assert by[a["id"]].state == "merged", by[a["id"]].reason
    assert by[b["id"]].state == "rejected" and by[b["id"]].reason.startswith("a copy of merged PR " + a["id"])
    assert len(expanded) == 2 and not list(expanded[0].glob(".lora-expanded*"))  # the rejected one too; no name
    if os.path.isdir("/proc/self/fd"):  # merged or rejected, the expansion's disk is freed after the verdict
        assert _open_expansions(expanded[0]) == []

    v1 = val.load_weights(val.show(1))
    targets = set(factors)
    for name in v0:
        if name in targets:
            assert rank_of(v1[name] - v0[name], rtol=1e-4) <= 4
            assert not torch.equal(v1[name], v0[name])
        else:  # untargeted tensors, bit for bit
            assert torch.equal(v1[name].view(torch.int32), v0[name].view(torch.int32)), name

    # the same factors again, after the merge: a replay, whatever the file's bytes
    c = _send(bob, "bob", factors, base_version=1)
    [v] = Validator(val, device="cpu").run()
    assert v.id == c["id"] and v.state == "rejected" and v.reason.startswith("replay"), v.reason

    # the audit recomputes the LoRA merge bit for bit with one thread and with every thread
    threads = torch.get_num_threads()
    try:
        for n in (1, os.cpu_count() or 1):
            torch.set_num_threads(n)
            report = audit(net.clone(f"carol{n}"))
            assert report.ok, report.problems
    finally:
        torch.set_num_threads(threads)

    # a second LoRA merge on top, then gc: version 1's weights are rebuilt from 0 and its factors
    train(alice, TrainOptions(steps=3, contributor="alice", device="cpu", lora="r=2", seed=1))
    d = submit(alice, SubmitOptions(contributor="alice"))
    [v] = Validator(val, device="cpu").run()
    assert v.id == d["id"] and v.accepted, v.reason
    assert [r["version"] for r in collect(val)["removed"]] == [1]
    dave = net.clone("dave")
    dave.checkout(1)
    assert dave.last_rebuild == {"version": 1, "from": 0, "deltas": 1}
    assert audit(dave).ok

    # the history tools read versions (merged weights), whatever kind the delta was
    from woolf.history import diff_versions, revert
    from woolf.ledger.export import export_version
    from woolf.report import credit

    changed = {r["name"] for r in diff_versions(dave, 0, 1)["tensors"] if r["l2"] > 0}
    assert changed == targets  # the LoRA merge moved its targets and nothing else
    assert export_version(dave, 1, tmp_path / "export")["files"]
    assert any(r["contributor"] == "alice" for r in credit(dave)["rows"])
    back = revert(alice, 2, contributor="alice")  # a dense delta: parent − version 2, the LoRA merge taken back
    [v] = Validator(val, device="cpu").run()
    assert v.id == back["id"] and v.accepted and "revert" in (v.flags or []), (v.reason, v.flags)


def test_lora_rejections_before_any_arithmetic_and_the_queue_goes_on(tmp_path, gpt2_dir):  # noqa: F811
    # c_attn of the width-32 GPT-2 is 32 x 96: rank 2 is 6,144 multiply-adds to expand, rank 4 12,288
    net = hf_network(tmp_path, gpt2_dir, **{"limits.max_lora_rank": "4", "scoring.uniqueness": "off",
                                           "scoring.min_effect": "0", "limits.max_lora_expand": "9216"})
    alice, val = net.clone("alice"), net.clone("val")
    spec = read_spec(alice.weights_path(alice.show(0)), alice.config.limits)
    name = "transformer.h.0.attn.c_attn.weight"
    rows, cols = spec[name][1]
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(2, cols, generator=g) * 0.01, torch.randn(rows, 2, generator=g) * 0.01
    good = {f"{name}.lora_A": A, f"{name}.lora_B": B, f"{name}.lora_scale": torch.tensor([2.0])}
    ok = {name: (A, B, 2.0)}
    bad = {
        "half": {k: v for k, v in good.items() if not k.endswith("lora_B")},
        "shape": {**good, f"{name}.lora_A": torch.randn(2, cols + 1)},
        "target": {k.replace("h.0.attn", "h.9.attn"): v for k, v in good.items()},
        "rank": {**good, f"{name}.lora_A": torch.randn(5, cols), f"{name}.lora_B": torch.randn(rows, 5)},
        "budget": {**good, f"{name}.lora_A": torch.randn(4, cols), f"{name}.lora_B": torch.randn(rows, 4)},
        "scale": {**good, f"{name}.lora_scale": torch.tensor([float("inf")])},
        "dtype": {**good, f"{name}.lora_B": B.double()},
    }
    sent = {why: _send(alice, "alice", ok, raw=raw)["id"] for why, raw in bad.items()}
    fine = _send(alice, "alice", ok)["id"]
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    want = {"half": "half a factor pair", "shape": "do not match the target",
            "target": "a LoRA target naming no tensor of the model", "rank": "above limits.max_lora_rank 4",
            "budget": "delta: expanding its 1 target at rank 4 is 1.2e4 multiply-adds, over limits.max_lora_expand "
                      "9.2e3: send a lower rank or fewer targets",
            "scale": "LoRA scale inf is not in", "dtype": "factor B is float64"}
    for why, pr in sent.items():
        v = verdicts[pr]
        assert v.state == "rejected" and want[why] in v.reason and "\n" not in v.reason, (why, v.reason)
    assert verdicts[fine].state == "merged", verdicts[fine].reason  # the queue went on

    # a ledger that does not accept the kind: the PR is rejected unread, and training refuses up front
    net2 = hf_network(tmp_path / "two", gpt2_dir, **{"delta.accept": "[\"dense\", \"topk\"]"})
    assert "lora" not in net2.work.config.delta.accept
    eve, val2 = net2.clone("eve"), net2.clone("val")
    with pytest.raises(UsageError, match="does not accept lora deltas"):
        train(eve, TrainOptions(steps=1, contributor="eve", device="cpu", lora="r=2"))
    pr = _send(eve, "eve", ok)["id"]
    [v] = Validator(val2, device="cpu").run()
    assert v.id == pr and v.state == "rejected" and "delta kind 'lora' is not accepted" in v.reason


def test_charlm_trains_lora_and_a_workload_without_it_is_refused_with_a_clear_message(make_net, monkeypatch):
    from woolf.workloads.charlm import CharLM
    from woolf.workloads.features import LORA

    net = make_net(**{"delta.accept": "[\"dense\", \"topk\", \"lora\"]"})
    alice, val = net.clone("alice"), net.clone("val")
    result = train(alice, TrainOptions(steps=2, contributor="alice", device="cpu", lora="r=2"))  # charlm_lora.py
    assert result["lora"] == "r=2,alpha=4" and result["training"]["lora"]["targets"] == 4  # 1 block x 4 linears
    submit(alice, SubmitOptions(contributor="alice"))
    [v] = Validator(val, device="cpu").run()
    assert v.state == "merged", v.reason
    monkeypatch.setattr(CharLM, "FEATURES", CharLM.FEATURES - {LORA})  # a workload that declares no LoRA
    with pytest.raises(UsageError, match="the charlm workload does not train LoRA adapters"):
        train(alice, TrainOptions(steps=1, contributor="alice", device="cpu", lora="r=2"))


def test_workload_params_lora_is_checked():
    from woolf.errors import ConfigError
    from woolf.workloads.hf import Transformers
    from woolf.workloads.hf.modeldir import REQUIRED

    files = {name: "0" * 64 for name in REQUIRED}
    assert Transformers(files=files, lora="r=8,alpha=16").lora.r == 8
    assert Transformers(files=files).lora is None
    with pytest.raises(ConfigError, match=r"workload.params.lora = 'r=x': r='x' is not a number"):
        Transformers(files=files, lora="r=x")
