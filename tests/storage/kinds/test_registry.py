"""woolf/storage/kinds/: the registry by name, and what each kind answers through the one interface."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file

from woolf.core.compress import compress, expand, parts_bytes
from woolf.errors import InvalidWeightsError
from woolf.protocol.compress_spec import KINDS, CompressSpec
from woolf.protocol.config import LimitsConfig
from woolf.storage import kinds
from woolf.storage.kinds import DENSE, LORA, TOPK, DeltaKind, UnknownKind
from woolf.storage.kinds.lora_file import LoraFile, LoraTensors
from woolf.storage.lazy import LazyTensors
from woolf.storage.weights import spec_of

pytestmark = pytest.mark.unit

LIMITS = LimitsConfig()
MODEL = {"a.weight": torch.randn(8, 6, generator=torch.Generator().manual_seed(0)), "b": torch.zeros(40)}
SPEC = spec_of(MODEL)


def _delta(seed=1):
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g) for k, v in MODEL.items()}


def test_the_registry_holds_exactly_the_names_the_config_check_allows():
    """protocol/ keeps the names as data (standard library only); each one is a module here."""
    assert kinds.names() == KINDS
    assert [kinds.get(n) for n in KINDS] == [DENSE, TOPK, LORA]
    assert kinds.PARAMS == ("chunk", "k", "bits")


@pytest.mark.parametrize("name", ["sparse", "", None, 3, ["dense"], "x" * 100])
def test_an_unknown_kind_is_one_line(name):
    with pytest.raises(UnknownKind) as err:
        kinds.kind_for({"kind": name}, "delta of version 3")
    assert isinstance(err.value, InvalidWeightsError)
    assert err.value.message.startswith("delta of version 3: unknown delta kind ") and "\n" not in err.value.message
    assert len(err.value.message) < 100


def test_every_kind_answers_the_whole_interface():
    """A kind that leaves a question to the base class would fail at its first PR, not here."""
    for kind in kinds.REGISTRY.values():
        for method in ("size_bound", "open", "load", "write"):
            assert getattr(type(kind), method) is not getattr(DeltaKind, method), (kind.name, method)
        assert kind.declared() == {"kind": kind.name} and kind.matches(kind.declared())
        assert kind.accepted_by(list(KINDS)) and not kind.accepted_by([n for n in KINDS if n != kind.name])


def test_admission_takes_an_accepted_kind_with_exactly_its_fields():
    base = {"sha256": "0" * 64, "md5": "0" * 32, "size": 1}
    assert kinds.admitted({**base, "kind": "lora"}, ["dense", "lora"]) is LORA
    assert kinds.admitted({**base, "kind": "topk", "chunk": 256, "k": 5, "bits": 2}, ["topk"]) is TOPK
    for d, accept, why in [
        ({"kind": "lora", "k": 5}, ["lora"], "a lora delta declares no chunk, k or bits"),
        ({"kind": "dense", "chunk": 5}, ["dense"], "a dense delta declares no chunk, k or bits"),
        ({"kind": "lora"}, ["dense", "topk"], "delta kind 'lora' is not accepted by this ledger "
                                              "(delta.accept: dense, topk)"),
        ({"kind": "topk", "chunk": 256, "k": 5}, ["topk"], "topk delta: a topk delta declares exactly chunk, k and bits"),
    ]:
        with pytest.raises(InvalidWeightsError) as err:
            kinds.admitted({**base, **d}, accept)
        assert err.value.message == why


def test_each_kind_bounds_its_file_for_the_model():
    dense = 8 + LIMITS.max_header_bytes + 4 * (48 + 40)
    assert DENSE.size_bound({"kind": "dense"}, SPEC, LIMITS) == dense
    # lora: a header, a scale per 2-D float32 target, and float32 factors of rank <= min(rows, cols)
    # (limits.max_delta_bytes bounds it further)
    assert LORA.size_bound({"kind": "lora"}, SPEC, LIMITS) == 8 + LIMITS.max_header_bytes + 4 + 4 * 6 * (8 + 6)
    # ... whose expansion fits limits.max_lora_expand: 96 multiply-adds are rank 2 of the 8 x 6 target
    budget = LimitsConfig(max_lora_expand=96)
    assert LORA.size_bound({"kind": "lora"}, SPEC, budget) == 8 + LIMITS.max_header_bytes + 4 + 4 * 2 * (8 + 6)
    spec = CompressSpec(16, 2, 2)
    assert TOPK.size_bound(spec.declared(), SPEC, LIMITS) == 8 + 4096 + parts_bytes(spec, SPEC)
    with pytest.raises(InvalidWeightsError, match="bad topk parameters"):
        TOPK.size_bound({"kind": "topk", "chunk": 16, "k": 99, "bits": 2}, SPEC, LIMITS)


def test_every_kind_brings_its_replay_and_one_without_is_unreplayable():
    """An audit asks the kind how its delta follows from the training's end (``proof_derive``)."""
    assert DENSE.unreplayable() is None and TOPK.unreplayable() is None and LORA.unreplayable() is None
    assert LORA.trains_adapters and not DENSE.trains_adapters and not TOPK.trains_adapters

    class Bare(DeltaKind):
        name = "bare"

    assert Bare().unreplayable() == "a bare delta (its kind brings no replay of its training)"


def test_a_dense_and_a_topk_delta_derive_from_the_final_state_as_submit_makes_them():
    from woolf.storage.kinds.base import Derivation

    base = {"w": torch.zeros(64)}
    out = {"w": torch.linspace(-1, 1, 64)}
    dense, none = DENSE.proof_derive(out, Derivation(base=base))
    assert none is None and torch.equal(dense["w"], out["w"])
    spec = CompressSpec(16, 2, 8)
    parts, residual = TOPK.proof_derive(out, Derivation(base=base, declared=spec.declared()))
    assert set(parts) and len(residual) == 64  # the parts, and the digest of what they left out


def test_a_dense_delta_is_written_as_it_is_and_read_lazily_or_whole(tmp_path):
    delta, path = _delta(), tmp_path / "d.safetensors"
    md5, sha = DENSE.write(delta, path, DENSE.declared())
    assert len(md5) == 32 and len(sha) == 64
    lazy = DENSE.open(path, DENSE.declared(), SPEC, LIMITS)
    assert isinstance(lazy, LazyTensors) and all(torch.equal(lazy[k], delta[k]) for k in delta)
    whole = kinds.load_delta(path, DENSE.declared(), SPEC, LIMITS)
    assert not isinstance(whole, LazyTensors) and all(torch.equal(whole[k], delta[k]) for k in delta)
    assert DENSE.held_whole(10, 10) and not DENSE.held_whole(11, 10)
    assert DENSE.sparse_entries(path, DENSE.declared(), SPEC, LIMITS) is None


def test_a_topk_delta_is_its_parts_expanded_and_merges_sparsely(tmp_path):
    delta, path, spec = _delta(), tmp_path / "t.safetensors", CompressSpec(16, 3, 4)
    declared = spec.declared()
    TOPK.write(delta, path, declared)
    parts = compress(delta, spec)
    want = expand(parts, spec, SPEC)
    got = TOPK.open(path, declared, SPEC, LIMITS)
    assert all(torch.equal(got[k], want[k]) for k in want)
    entries = TOPK.sparse_entries(path, declared, SPEC, LIMITS)
    for name, (where, vals) in entries.items():  # exactly the kept values, at their flat positions
        assert torch.equal(want[name].reshape(-1)[where], vals)
        assert int(torch.count_nonzero(want[name])) <= len(where) <= math.ceil(want[name].numel() / 16) * 3
    other = CompressSpec(16, 4, 4).declared()  # a file with more than the declared k
    with pytest.raises(InvalidWeightsError, match="more or other data than the declared k"):
        TOPK.open(path, other, SPEC, LIMITS)
    assert TOPK.held_whole(1 << 40, 1)


def test_a_lora_delta_is_read_as_its_expanded_product_never_held_whole(tmp_path):
    g = torch.Generator().manual_seed(2)
    factors = {"a.weight": (torch.randn(2, 6, generator=g), torch.randn(8, 2, generator=g), 2.0)}
    path = tmp_path / "l.safetensors"
    LORA.write(LoraFile(factors, SPEC, max_rank=8), path, LORA.declared())
    d = LORA.open(path, LORA.declared(), SPEC, LIMITS)
    assert isinstance(d, LoraTensors) and set(d) == set(MODEL) and d.targets == {"a.weight": 2}
    assert not bool(d["b"].any())  # untargeted: -0.0, the merge leaves it bit for bit
    before = d["a.weight"]
    LORA.expand_ahead(d, tmp_path)
    assert torch.equal(d["a.weight"], before)
    with pytest.raises(ValueError, match="hashed before it is opened"):
        LORA.load(path, LORA.declared(), SPEC, LIMITS, on_block=lambda b: None)
    assert not LORA.held_whole(1, 1 << 40)
    save_file({"a.weight.lora_A": torch.randn(9, 6), "a.weight.lora_B": torch.randn(8, 9),
               "a.weight.lora_scale": torch.tensor([1.0])}, str(path))
    with pytest.raises(InvalidWeightsError, match="rank"):
        LORA.open(path, LORA.declared(), SPEC, LimitsConfig(max_lora_rank=8))
