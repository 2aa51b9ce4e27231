"""Issue 37, breach 3: a copy is judged against every earlier open PR, not the 64 oldest.

The attack: 65 junk keyless PRs (one object, no new bytes), then an honest keyless PR, then an
attacker's signed copy of it (signed PRs are served first). The copy check compared a PR with at most
64 earlier open PRs: the copy merged and the honest PR was refused as its copy. The copy index
(woolf/validator/copyindex.py) reads each delta once and compares sketches with all of them.
"""

from __future__ import annotations

import pytest
import torch

from tests.crafting import craft_commit, craft_pr, open_prs, random_delta
from woolf.forges.local import LocalForge
from woolf.storage.pointer import Pointer
from woolf.storage.weights import load_checked
from woolf.validator import Validator


def test_a_signed_copy_behind_64_junk_prs_is_caught_and_the_honest_pr_merges(make_net):
    net = make_net()
    val, dave, mal = net.clone("val"), net.clone("dave"), net.clone("alice")
    junk = random_delta(mal, scale=0.001, seed=5)
    mal.fetch()  # 5 keyless names x 13: under the per-name and keyless limits; 16 per push
    open_prs(mal, [craft_commit(mal, tensors=junk, who=f"junk{i % 5}", sign_key=False, fetch=False)
                   for i in range(65)])
    honest = net.train_submit(dave, "dave")["id"]
    pr = next(p for p in LocalForge.for_ledger(val).list() if p.id == honest)
    d = pr.submission["delta"]  # the delta dave submitted, read back from storage
    theirs = load_checked(val.store.fetch_object(Pointer(d["md5"], d["size"], "delta.safetensors")),
                          val.config.limits)
    g = torch.Generator().manual_seed(9)
    copy = {k: (1.02 * v + 1e-4 * torch.randn(v.shape, generator=g)).to(v.dtype) for k, v in theirs.items()}
    stolen = craft_pr(mal, tensors=copy, who="alice")  # signed by alice's listed key: judged first
    verdicts = {v.id: v for v in Validator(val, device="cpu").run(ids=[honest, stolen])}
    assert not verdicts[stolen].accepted and "a copy of PR " + honest in verdicts[stolen].reason, \
        verdicts[stolen].reason  # main: merged (+gain), and the honest PR rejected as its copy
    assert verdicts[honest].accepted, verdicts[honest].reason


@pytest.mark.unit
def test_sketches_estimate_cosines_and_a_secret_seed_decides_the_buckets():
    from woolf.core.scores import similarity
    from woolf.core.sketch import estimate, sketch
    from woolf.validator.copyindex import CopyIndex

    g = torch.Generator().manual_seed(0)
    a = {"w": torch.randn(300, 200, generator=g), "b": torch.randn(200, generator=g)}
    scaled = {k: 1.5 * v + 0.05 * torch.randn(v.shape, generator=g) for k, v in a.items()}
    other = {k: torch.randn(v.shape, generator=g) for k, v in a.items()}
    seed = b"s" * 32
    sa, ss, so = sketch(a, seed), sketch(scaled, seed), sketch(other, seed)
    assert abs(estimate(sa, ss, 0.97).cosine - similarity(a, scaled, 0.97).cosine) < 0.2
    assert abs(estimate(sa, so, 0.97).cosine) < 0.5
    negated = sketch({k: -v for k, v in a.items()}, seed)
    assert estimate(sa, negated, 0.97).cosine < -0.95
    from woolf.core.sketch import estimate_many, matrix

    cos, share = estimate_many(matrix(sa), torch.stack([matrix(ss), matrix(so)]), 0.97)
    assert abs(cos[0].item() - estimate(sa, ss, 0.97).cosine) < 1e-6
    assert abs(share[1].item() - estimate(sa, so, 0.97).copied_share) < 1e-6
    index = CopyIndex(seed)
    me = index.add("a", a)
    items = [("other", index.entry("o", lambda: other)), ("copy", index.entry("s", lambda: scaled)),
             ("unreadable", index.entry("u", lambda: None))]
    assert index.candidates(me, items, 0.97) == ["copy"]
    index.prune({"a", "s"})
    assert set(index.entries) == {"a", "s"}
    assert CopyIndex().seed != CopyIndex().seed  # drawn per validator: nobody can aim at the buckets


@pytest.mark.unit
def test_a_sketch_is_its_definition_row_by_row(monkeypatch):
    """issue 35: element c of row r (rows of WIDTH, per block) goes to bucket (c + shift_r) mod WIDTH with
    sign_r, both from one draw per row; blocks and a partial last row included (a slow reference)."""
    import woolf.core.sketch as sk

    monkeypatch.setattr(sk, "BLOCK", 256)
    t = torch.randn(1000, generator=torch.Generator().manual_seed(1)).to(torch.float64)  # 3 blocks + 232
    seed, w = b"k" * 32, sk.WIDTH
    want = torch.zeros(w, dtype=torch.float64)
    for b, start in enumerate(range(0, t.numel(), sk.BLOCK)):
        block = t[start:start + sk.BLOCK]
        r = torch.randint(0, 2 * w, (-(-block.numel() // w),), generator=sk._generator(seed, "x", b))
        for i, x in enumerate(block.tolist()):
            row, col = divmod(i, w)
            want[(col + int(r[row]) % w) % w] += x * (1 if int(r[row]) // w else -1)
    got = sk.sketch_tensor(t, seed, "x")
    assert torch.allclose(got.to(torch.float64), want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(sk.sketch_tensor(t, b"j" * 32, "x"), got)  # another seed, other buckets
