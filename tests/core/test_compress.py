"""Compressed (top-k) deltas: the arithmetic, the participant's residual, and every rejection path."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import load_file, save

from tests.crafting import craft_pr
from woolf.audit.recompute import audit
from woolf.core.compress import CompressSpec, check_parts, compress, expand, parse_spec, parts_spec
from woolf.errors import UsageError
from woolf.forges.local import LocalForge
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.participant.state import state_dir
from woolf.protocol import layout
from woolf.validator import Validator


def _spec(tensors):
    return {k: ("F32", tuple(v.shape)) for k, v in tensors.items()}


@pytest.mark.unit
def test_parse_spec():
    assert parse_spec("dense") is None
    assert parse_spec("topk:0.02,bits:2") == CompressSpec(256, 5, 2)
    assert parse_spec("topk:0.01,bits:8,chunk:4096") == CompressSpec(4096, 41, 8)
    for bad in ("topk", "topk:2", "topk:0.1,bits:3", "topk:0.1,chunk:8", "sparse:0.1", "topk:0.1,bits:2,bits:4"):
        with pytest.raises(ValueError):
            parse_spec(bad)


@pytest.mark.unit
def test_compress_expand_exact_layout_and_error():
    gen = torch.Generator().manual_seed(0)
    delta = {"a": torch.randn(300, 7, generator=gen), "b": torch.randn(3, generator=gen),
             "c": torch.randn(512, generator=gen)}
    spec = CompressSpec(256, 8, 4)
    parts = compress(delta, spec)
    want = parts_spec(spec, _spec(delta))
    assert {k: (str(v.dtype), tuple(v.shape)) for k, v in parts.items()} == {
        "idx": ("torch.uint8", want["idx"][1]), "val": ("torch.uint8", want["val"][1]),
        "scale": ("torch.bfloat16", want["scale"][1])}
    # a: 2100 = 8 full chunks + 52; b: 3 (< k: all kept); c: 2 chunks
    assert want["idx"][1] == (8 * 8 + 8 + 3 + 16,)
    dense = expand(parts, spec, _spec(delta))
    assert int((dense["b"] != 0).sum()) == 3 and int((dense["a"] != 0).sum()) == 72
    # kept entries are the largest of their chunk; more bits, less error; expansion is deterministic
    chunk = delta["c"][:256]
    top = set(torch.topk(chunk.abs(), 8).indices.tolist())
    assert set(torch.nonzero(dense["c"][:256]).flatten().tolist()) == top
    errs = []
    for bits in (2, 4, 8):
        s = CompressSpec(256, 8, bits)
        d = expand(compress(delta, s), s, _spec(delta))
        kept = dense["c"] != 0
        errs.append(float((d["c"][kept] - delta["c"][kept]).abs().max()))
    assert errs[0] > errs[1] > errs[2]
    again = expand(compress(delta, spec), spec, _spec(delta))
    assert all(torch.equal(again[k], dense[k]) for k in dense)


def _bad(parts, **changes):
    out = {k: v.clone() for k, v in parts.items()}
    for key, fn in changes.items():
        out[key] = fn(out[key])
    return out


@pytest.mark.unit
def test_check_parts_names_each_problem():
    gen = torch.Generator().manual_seed(1)
    delta = {"w": torch.randn(1000, generator=gen)}
    spec = CompressSpec(512, 4, 2)  # int16 offsets: a value past the chunk is representable
    parts = compress(delta, spec)
    ms = _spec(delta)

    def oor(t):
        t[0] = 600
        return t

    def neg(t):
        t[0] = -1
        return t

    def dup(t):
        t[1] = t[0]
        return t

    def desc(t):
        t[0], t[1] = t[1].clone(), t[0].clone()
        return t

    def tail(t):  # the last chunk holds 488 values
        t[-1] = 500
        return t

    cases = {"out of range": _bad(parts, idx=oor), "out of range ": _bad(parts, idx=neg),
             "duplicate": _bad(parts, idx=dup), "increasing order": _bad(parts, idx=desc),
             "out of range  ": _bad(parts, idx=tail),
             "scale": _bad(parts, scale=lambda t: t.fill_(float("nan"))),
             "scale ": _bad(parts, scale=lambda t: t.fill_(-1.0)),
             "as the declared": _bad(parts, val=lambda t: torch.cat([t, t])),
             "as the declared ": _bad(parts, idx=lambda t: t.to(torch.int32))}
    spec3 = CompressSpec(512, 3, 2)
    p3 = compress({"w": torch.randn(500, generator=gen)}, spec3)
    p3["val"][-1] |= 0xC0  # a 4th level in the last byte, where the declared k=3 allows none
    with pytest.raises(ValueError, match="more values than the declared k"):
        check_parts(p3, spec3, {"w": ("F32", (500,))})
    for expect, bad in cases.items():
        with pytest.raises(ValueError, match=expect.strip()):
            check_parts(bad, spec, ms)


def _crafted(led, parts: dict, declared: dict, size: int | None = None, who="mallory"):
    data = save(parts)
    return craft_pr(led, raw=data, who=who, meta_patch={"delta": {
        **declared, "sha256": hashlib.sha256(data).hexdigest(), "md5": hashlib.md5(data).hexdigest(),
        "size": size or len(data)}})


def test_topk_pr_merges_audits_and_carries_its_residual(make_net):
    net = make_net(**{"policy.min_improvement": "-10", "delta.compress": "topk:0.05,bits:4"})
    alice, val = net.clone("alice"), net.clone("val")
    first = net.train_submit(alice, "alice")
    assert first["delta_kind"] == "topk"
    residual_path = state_dir(alice) / "compress" / "residual.safetensors"
    kept = load_file(residual_path)
    [v] = Validator(val, device="cpu").run()
    assert v.accepted, v.reason
    # the version is base + the expanded delta, and base + expanded + residual is what alice trained
    trained = load_file(alice.root / ".woolf" / "work" / "trained.safetensors")
    base, merged = alice.load_weights(alice.show(0)), val.load_weights(val.head("refs/remotes/origin/main"))
    for k in trained:
        assert torch.allclose(merged[k] + kept[k], trained[k], atol=1e-5)
    assert merged.keys() == base.keys() and any(not torch.equal(merged[k], base[k]) for k in base)
    # a dense file is the model's size; this one is far smaller
    assert first["delta_size"] * 4 < alice.pointer(alice.show(0).commit).size
    train(alice, TrainOptions(steps=5, contributor="alice"))
    second = submit(alice, SubmitOptions(contributor="alice"))
    assert "carried the compression residual" in second["error_feedback"]
    Validator(val, device="cpu").run()
    report = audit(val)
    assert report.ok, report.problems
    # --fresh discards it with the rest of the participant's state
    train(alice, TrainOptions(steps=5, contributor="alice", fresh=True))
    assert not residual_path.exists()


def test_residual_that_does_not_fit_is_set_aside(make_net, capsys):
    from woolf.cli.main import main

    net = make_net(**{"policy.min_improvement": "-10"})
    alice = net.clone("alice")
    path = state_dir(alice) / "compress" / "residual.safetensors"
    path.parent.mkdir(parents=True)
    path.write_bytes(save({"not.this.model": torch.zeros(3)}))
    train(alice, TrainOptions(steps=5, contributor="alice"))
    assert main(["-C", str(alice.root), "submit", "--compress", "topk:0.05,bits:2", "--contributor", "alice"]) == 0
    out = capsys.readouterr()
    assert "topk delta" in out.out and "set aside (its tensors are not this model's)" in out.err
    assert list(path.parent.glob("residual.safetensors.set-aside-*")) and path.exists()  # a fresh one kept
    assert main(["-C", str(alice.root), "submit", "--compress", "topk:2"]) == 2  # a bad setting: usage error
    assert "--compress 'topk:2'" in capsys.readouterr().err


def test_every_bad_sparse_delta_is_rejected_with_its_reason(make_net):
    net = make_net(**{"policy.min_improvement": "-10"})
    val = net.clone("val")
    model = val.load_weights(val.head())
    ms = {k: ("F32", tuple(t.shape)) for k, t in model.items()}
    gen = torch.Generator().manual_seed(0)
    delta = {k: torch.randn(t.shape, generator=gen) * 1e-3 for k, t in model.items()}
    spec = CompressSpec(512, 4, 2)
    good = compress(delta, spec)
    ids = {}

    def with_idx(fn):
        p = {k: v.clone() for k, v in good.items()}
        fn(p["idx"])
        return p

    ids["out of range"] = _crafted(val, with_idx(lambda t: t.__setitem__(0, 700)), spec.declared())
    ids["duplicate indices"] = _crafted(val, with_idx(lambda t: t.__setitem__(1, int(t[0]))), spec.declared())
    more = {**good, "val": torch.cat([good["val"], good["val"]])}
    ids["more or other data than the declared k"] = _crafted(val, more, spec.declared())
    big = compress(delta, CompressSpec(512, 256, 8))  # claims k=4, carries k=256 at 8 bits
    ids["at most"] = _crafted(val, big, spec.declared())
    ids["bits 3 is not one of"] = _crafted(val, good, {**spec.declared(), "bits": 3})
    ids["not accepted by this ledger"] = _crafted(val, good, {**spec.declared(), "kind": "dct"})
    ids["a dense delta declares no"] = _crafted(val, good, {"kind": "dense", "k": 4})
    ok = _crafted(val, good, spec.declared())
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert verdicts[ok].accepted, verdicts[ok].reason
    for reason, sub_id in ids.items():
        assert not verdicts[sub_id].accepted
        assert reason in verdicts[sub_id].reason, (reason, verdicts[sub_id].reason)
    assert parts_spec(spec, ms)["idx"][1] == tuple(good["idx"].shape)


def test_a_kind_the_ledger_does_not_accept(make_net):
    net = make_net(**{"policy.min_improvement": "-10", "delta.accept": '["dense"]'})
    alice, val = net.clone("alice"), net.clone("val")
    with pytest.raises(UsageError, match="does not accept topk"):
        net.train_submit(alice, "alice", compress="topk:0.02,bits:2")
    model = val.load_weights(val.head())
    spec = CompressSpec(256, 5, 2)
    sub_id = _crafted(val, compress({k: torch.ones_like(t) for k, t in model.items()}, spec), spec.declared())
    [v] = Validator(val, device="cpu").run()
    assert v.id == sub_id and "delta kind 'topk' is not accepted by this ledger" in v.reason
    assert LocalForge.for_ledger(val).get(sub_id).state == "rejected"
    assert layout.CONFIG  # the ledger kept its config


@pytest.mark.unit
def test_sparse_merges_equal_the_dense_formula_bit_for_bit():
    from woolf.core.compress import apply_sparse_, entries
    from woolf.core.merge_rules import Rule, f32, merge_step

    gen = torch.Generator().manual_seed(2)
    for dtype in (torch.float32, torch.bfloat16):
        cur = {"a": torch.randn(40, 33, generator=gen).to(dtype), "b": torch.randn(7, generator=gen).to(dtype)}
        cur["a"].view(-1)[:50] = -0.0  # -0.0 in the weights: the dense merge makes them +0.0
        fast = {k: v.clone() for k, v in cur.items()}
        ms = {k: ("F32", tuple(v.shape)) for k, v in cur.items()}
        stale: dict = {}
        for i in range(4):
            delta = {k: torch.randn(v.shape, generator=gen) for k, v in cur.items()}
            delta["a"].view(-1)[:300] = -cur["a"].view(-1)[:300].float()  # sums of exactly 0 and -0.0
            spec = CompressSpec(64, 8 + i, 2)
            parts = compress(delta, spec)
            att = 1 / (1 + i)
            dense = expand(parts, spec, ms, {k: v.dtype for k, v in cur.items()})
            cur = merge_step(Rule(), cur, None, dense, att).candidate
            for name, _, where, vals in entries(parts, spec, ms):
                stale[name] = apply_sparse_(fast[name], where, vals, f32(1.0 * att), stale.get(name))
            for k in cur:
                assert save({k: cur[k]}) == save({k: fast[k]}), (dtype, i, k)


@pytest.mark.unit
def test_sparse_merge_carries_a_negative_zero_it_wrote_to_the_next_merge():
    from woolf.core.compress import apply_sparse_
    from woolf.core.merge import apply_delta

    cur = {"w": torch.tensor([-0.0, 1.0, 2.0, -3.0])}
    fast = {"w": cur["w"].clone()}
    # merge 1 writes -0.0 at 0 (-0.0 + -0.0); merge 2 does not touch 0: dense makes it +0.0
    steps = [(torch.tensor([0, 3]), torch.tensor([-0.0, 3.0])), (torch.tensor([1]), torch.tensor([0.5]))]
    stale = None
    for where, vals in steps:
        dense = torch.zeros(4)
        dense[where] = vals
        cur = apply_delta(cur, {"w": dense}, 1.0)
        stale = apply_sparse_(fast["w"], where, vals, 1.0, stale)
        assert save(cur) == save(fast)
    assert stale.numel() == 0 and not torch.signbit(fast["w"][0])
