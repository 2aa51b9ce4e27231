"""The lora delta file (woolf/storage/kinds/lora_file.py): every rejection before any arithmetic, lazily expanded reads."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from woolf.core.lora import expand
from woolf.core.merge_rules import Rule
from woolf.errors import InvalidWeightsError
from woolf.ledger.transition import merge_in_place, open_delta, streamable
from woolf.protocol.config import LimitsConfig
from woolf.storage.kinds.lora_file import LoraFile, LoraTensors, factor_tensors
from woolf.storage.weights import spec_of

pytestmark = pytest.mark.unit

MODEL = {"a.weight": torch.randn(8, 6), "a.bias": torch.zeros(8), "b.weight": torch.randn(4, 8),
         "emb": torch.randn(10, 4).to(torch.bfloat16)}


def _factors(r=2):
    g = torch.Generator().manual_seed(1)
    return {"a.weight": (torch.randn(r, 6, generator=g), torch.randn(8, r, generator=g), 2.0)}


def _write(tmp_path, tensors):
    p = tmp_path / "d.safetensors"
    save_file(tensors, str(p))
    return p


def _open(path, **limits):
    return LoraTensors.open(path, LimitsConfig(**limits), expect=spec_of(MODEL), label="delta")


def test_reads_expand_targets_and_leave_others_minus_zero(tmp_path):
    path = tmp_path / "f.safetensors"
    LoraFile(_factors(), spec_of(MODEL), max_rank=8).write(path)
    d = _open(path)
    A, B, s = _factors()["a.weight"]
    assert d.targets == {"a.weight": 2} and set(d) == set(MODEL)
    assert torch.equal(d["a.weight"], expand(A, B, s))
    z = d["b.weight"]
    assert z.shape == (4, 8) and not z.any() and bool(torch.signbit(z).all())
    cur = {k: v.clone() for k, v in MODEL.items() if k != "emb"}
    cur["b.weight"][0, 0] = -0.0
    d2 = LoraTensors.open(path, LimitsConfig(), expect=spec_of(cur))
    assert streamable(Rule(), cur, d2)
    before = {k: v.clone() for k, v in cur.items()}
    merge_in_place(Rule(), cur, d2, 0.5)
    for name in ("a.bias", "b.weight"):  # untargeted: bit for bit, -0.0 included
        assert torch.equal(cur[name].view(torch.int32), before[name].view(torch.int32))
    assert not torch.equal(cur["a.weight"], before["a.weight"])
    assert open_delta(path, {"kind": "lora"}, spec_of(cur), LimitsConfig()).targets == {"a.weight": 2}


def _reject(tmp_path, tensors, msg, **limits):
    with pytest.raises(InvalidWeightsError, match=msg) as err:
        _open(_write(tmp_path, tensors), **limits)
    assert "\n" not in err.value.message


def test_every_rejection_names_the_tensor_and_the_rule(tmp_path):
    good = factor_tensors(_factors())
    drop = lambda k: {n: t for n, t in good.items() if n != k}  # noqa: E731
    _reject(tmp_path, drop("a.weight.lora_B"), r"tensor 'a.weight': half a factor pair \(a.weight.lora_B is missing\)")
    _reject(tmp_path, drop("a.weight.lora_A"), r"tensor 'a.weight': half a factor pair")
    _reject(tmp_path, drop("a.weight.lora_scale"), r"tensor 'a.weight': no scale")
    _reject(tmp_path, {**good, "a.weight.lora_A": torch.randn(2, 5)}, r"tensor 'a.weight': .*do not match the target")
    _reject(tmp_path, {**good, "a.weight.lora_B": torch.randn(7, 2)}, r"tensor 'a.weight': .*do not match the target")
    renamed = {k.replace("a.weight", "nope.weight"): v for k, v in good.items()}
    _reject(tmp_path, renamed, r"tensor 'nope.weight': a LoRA target naming no tensor of the model")
    _reject(tmp_path, good, r"tensor 'a.weight': rank 2 is above limits.max_lora_rank 1", max_lora_rank=1)
    for bad in (float("nan"), float("inf"), 1e6, -1.0, 0.0):
        _reject(tmp_path, {**good, "a.weight.lora_scale": torch.tensor([bad])}, r"tensor 'a.weight': LoRA scale")
    _reject(tmp_path, {**good, "a.weight.lora_A": good["a.weight.lora_A"].double()},
            r"tensor 'a.weight': factor A is float64; LoRA factors must be float32 or bfloat16")
    _reject(tmp_path, {**good, "a.weight.lora_B": good["a.weight.lora_B"].half()},
            r"tensor 'a.weight': factor B is float16")
    _reject(tmp_path, {**good, "a.weight.lora_scale": torch.tensor([2.0], dtype=torch.float64)},
            r"tensor 'a.weight': lora_scale must be float32 of shape \[1\]")
    _reject(tmp_path, {**good, "a.bias.lora_A": torch.randn(1, 1), "a.bias.lora_B": torch.randn(8, 1),
                       "a.bias.lora_scale": torch.tensor([1.0])}, r"tensor 'a.bias': a LoRA target must be a 2-D")
    _reject(tmp_path, {"emb.lora_A": torch.randn(1, 4), "emb.lora_B": torch.randn(10, 1),
                       "emb.lora_scale": torch.tensor([1.0])}, r"tensor 'emb': LoRA targets float32 weights")
    _reject(tmp_path, {**good, "a.weight": torch.randn(8, 6)}, r"tensor 'a.weight' is not a LoRA factor")
    _reject(tmp_path, {"x": torch.zeros(1)}, r"is not a LoRA factor")


def test_lora_file_refuses_what_it_would_send(tmp_path):
    f = _factors()
    A, B, _ = f["a.weight"]
    with pytest.raises(InvalidWeightsError, match="factor A holds NaN"):
        LoraFile({"a.weight": (A * float("nan"), B, 2.0)}, spec_of(MODEL), 8)
    with pytest.raises(InvalidWeightsError, match="every factor pair is zero"):
        LoraFile({"a.weight": (A, B * 0, 2.0)}, spec_of(MODEL), 8)
    with pytest.raises(InvalidWeightsError, match="LoRA scale"):
        LoraFile({"a.weight": (A, B, float("inf"))}, spec_of(MODEL), 8)


def test_expand_once_reads_the_same_bits_and_frees_its_file(tmp_path, monkeypatch):
    import woolf.storage.kinds.lora_file as lora_mod
    from woolf.core.scores import content_sha256

    path = tmp_path / "f.safetensors"
    factors = {**_factors(), "b.weight": (torch.randn(3, 8), torch.randn(4, 3), 0.5)}
    LoraFile(factors, spec_of(MODEL), max_rank=8).write(path)
    each = _open(path)
    want = {k: each[k] for k in each}
    calls = []
    monkeypatch.setattr(lora_mod, "expand", lambda *a: calls.append(1) or expand(*a))
    work = tmp_path / "work"
    work.mkdir()
    once = _open(path)
    once.expand_once(work)
    assert len(calls) == 2 and list(work.iterdir()) == []  # each target once, into a file with no name
    for _ in range(3):  # read again and again: no more arithmetic, the same bits
        got = {k: once[k] for k in once}
        assert set(got) == set(want)
        assert all(torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8)) for k in want)
    assert len(calls) == 2
    assert content_sha256(once) == content_sha256(each)  # the replay hash is what it was
    once.clip(0.25)
    each.clip(0.25)
    assert all(torch.equal(once[k], each[k]) for k in each)
    assert len(calls) == 2 + 2 * 2  # only the unexpanded mapping did arithmetic again (hash, clip)
    fh = once._expanded[0]
    once.close()
    assert fh.closed


def test_a_factor_file_with_metadata_is_refused(tmp_path):
    """docs/protocol.md: a lora file is factor pairs and nothing else; a safetensors __metadata__ map
    was accepted all the same."""
    path = tmp_path / "m.safetensors"
    save_file(factor_tensors(_factors()), str(path), metadata={"note": "hello"})
    with pytest.raises(InvalidWeightsError, match=r"delta: a lora delta carries no __metadata__"):
        _open(path)
    assert _open(_write(tmp_path, factor_tensors(_factors()))).targets == {"a.weight": 2}


def test_an_expansion_over_the_budget_is_refused_from_the_header_before_any_factor_is_read(tmp_path, monkeypatch):
    import woolf.storage.kinds.lora_file as lora_mod

    calls = []
    monkeypatch.setattr(lora_mod, "expand", lambda *a: calls.append(1) or expand(*a))
    good = factor_tensors({**_factors(r=2), "b.weight": (torch.randn(3, 8), torch.randn(4, 3), 0.5)})
    # 2 x 8 x 6 + 3 x 4 x 8 = 192 multiply-adds; the scale is inf: the budget is what refuses it, unread
    path = _write(tmp_path, {**good, "a.weight.lora_scale": torch.tensor([float("inf")])})
    with pytest.raises(InvalidWeightsError) as err:
        _open(path, max_lora_expand=191)
    assert err.value.message == ("delta: expanding its 2 targets at ranks 2 to 3 is 192 multiply-adds, over "
                                 "limits.max_lora_expand 191: send a lower rank or fewer targets")
    d = _open(_write(tmp_path, good), max_lora_expand=192)  # at the budget: opened, expanded when read
    assert d.targets == {"a.weight": 2, "b.weight": 3} and d["a.weight"].shape == (8, 6)
    assert len(calls) == 1
    # merged deltas are read back whatever today's budget and rank rules (the audit, rebuilds)
    from woolf.storage.weights import TRUSTED_LIMITS

    A, B = torch.randn(7, 6), torch.randn(8, 7)  # rank 7 of an 8 x 6 target: refused today, merged before
    wide = _write(tmp_path, factor_tensors({"a.weight": (A, B, 1.0)}))
    _reject(tmp_path, factor_tensors({"a.weight": (A, B, 1.0)}), r"tensor 'a.weight': rank 7 is above min\(rows, cols\)")
    assert LoraTensors.open(wide, TRUSTED_LIMITS, expect=spec_of(MODEL)).targets == {"a.weight": 7}


def test_a_lora_delta_is_compared_in_factor_space_never_expanded(tmp_path, monkeypatch):
    """core/scores.py similarity against another PR's lora delta: its pairs' products are never formed
    (each comparison used to expand every target again), and the cosine is the expansion's."""
    import woolf.storage.kinds.lora_file as lora_mod
    from woolf.core.scores import similarity

    path = tmp_path / "f.safetensors"
    factors = {**_factors(), "b.weight": (torch.randn(3, 8), torch.randn(4, 3), 0.5)}
    LoraFile(factors, spec_of(MODEL), max_rank=8).write(path)
    dense = {k: v for k, v in _open(path).items()}  # the expansion of record, as a dense delta
    g = torch.Generator().manual_seed(3)
    noisy = {k: v + 0.05 * torch.randn(v.shape, generator=g).to(v.dtype) if v.is_floating_point() else v
             for k, v in dense.items()}
    calls = []
    monkeypatch.setattr(lora_mod, "expand", lambda *a: calls.append(1) or expand(*a))
    other = _open(path)
    for mine in (dense, noisy, {k: -v for k, v in noisy.items()}):
        want, got = similarity(mine, dense, 0.97), similarity(mine, other, 0.97)
        assert abs(got.cosine - want.cosine) < 1e-6 and abs(got.copied_share - want.copied_share) < 1e-6
    assert calls == []
    other.clip(0.5)  # a clipped delta reads back clipped: compared as it reads
    assert abs(similarity(dense, other, 0.97).cosine - 1) < 1e-6 and len(calls) == 2
