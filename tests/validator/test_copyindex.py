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
    assert index.candidates(me, items, 0.97) == [("copy", False)]
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


def _stolen_copy(val, pr) -> dict:
    """An attacker's near copy of ``pr``'s delta, read back from storage (cosine ~0.9998 with it)."""
    d = pr.submission["delta"]
    theirs = load_checked(val.store.fetch_object(Pointer(d["md5"], d["size"], "delta.safetensors")),
                          val.config.limits)
    g = torch.Generator().manual_seed(9)
    return {k: (1.02 * v + 1e-4 * torch.randn(v.shape, generator=g)).to(v.dtype) for k, v in theirs.items()}


def test_keyless_decoys_that_declare_the_copys_sha256_cannot_crowd_the_original_out(make_net):
    """The crowded copy check: a PR that only DECLARES another PR's sha256 (its delta not in storage) took one
    of the copy check's eight exact places; twelve such keyless decoys let a signed copy of an honest
    open PR merge first, and the honest PR was refused as a copy of its own copy. Only bytes read and
    proven to be a sha256 count now, and there is no bound a crowd can fill."""
    import hashlib

    from safetensors.torch import save

    net = make_net()
    val, dave, mal = net.clone("val"), net.clone("dave"), net.clone("alice")
    honest = net.train_submit(dave, "dave")["id"]
    pr = next(p for p in LocalForge.for_ledger(val).list() if p.id == honest)
    data = save(_stolen_copy(val, pr))
    fake = {"kind": "dense", "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    mal.fetch()
    open_prs(mal, [craft_commit(mal, raw=b"decoy", who=f"decoy{i}", sign_key=False, fetch=False,
                                meta_patch={"delta": {**fake, "md5": f"{i:032x}"}}) for i in range(12)])
    stolen = craft_pr(mal, raw=data, who="alice")  # signed by alice's listed key: judged first
    verdicts = {v.id: v for v in Validator(val, device="cpu").run(ids=[honest, stolen])}
    assert not verdicts[stolen].accepted and "a copy of PR " + honest in verdicts[stolen].reason, \
        verdicts[stolen].reason  # before: merged, and the honest PR rejected as a copy of merged PR stolen
    assert verdicts[honest].accepted, verdicts[honest].reason


class _Files:
    """A local HTTP server for a directory (a contributor's own storage behind `--delta-url-base`)."""

    def __init__(self, root):
        self.root = root

    def __enter__(self):
        import functools
        import http.server
        import threading

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

        handler = functools.partial(Quiet, directory=str(self.root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_an_open_pr_whose_delta_is_a_url_is_copy_checked(make_net):
    """URL deltas: a PR whose delta is behind a URL (`woolf submit --delta-url-base`) was never
    listed by the copy index; a signed copy of it merged first and the original was refused as its copy."""
    net = make_net(**{"forge.delta_schemes": '["https", "http"]'})
    val, dave, mal = net.clone("val"), net.clone("dave"), net.clone("alice")
    with _Files(net.root / "storage") as files:  # dave's delta: uploaded, and named by its URL
        honest = net.train_submit(dave, "dave", delta_url_base=files.url)["id"]
        pr = next(p for p in LocalForge.for_ledger(val).list() if p.id == honest)
        assert pr.submission["delta"]["url"].startswith(files.url)
        stolen = craft_pr(mal, tensors=_stolen_copy(val, pr), who="alice")  # signed: judged first
        verdicts = {v.id: v for v in Validator(val, device="cpu").run(ids=[honest, stolen])}
    assert not verdicts[stolen].accepted and "a copy of PR " + honest in verdicts[stolen].reason, \
        verdicts[stolen].reason  # before: merged, and the honest PR rejected as a copy of merged PR stolen
    assert verdicts[honest].accepted, verdicts[honest].reason


@pytest.mark.unit
def test_a_crowd_more_similar_than_the_original_does_not_push_it_out_of_the_exact_look():
    """Twenty earlier entries that the sketches rank above the original took every exact place before; now
    every entry the sketches cannot rule out is compared, however many, and the original is among them."""
    from woolf.validator.copyindex import MAX_EXACT, CopyIndex

    g = torch.Generator().manual_seed(3)
    mine = {f"t{i}": torch.randn(64, 96, generator=g) for i in range(4)}
    original = {k: 0.98 * v + 0.2 * torch.randn(v.shape, generator=g) for k, v in mine.items()}  # cosine ~0.98
    index = CopyIndex(b"k" * 32)
    me = index.add("me", mine)
    crowd = [(f"d{i}", index.entry(f"d{i}", lambda i=i: {k: v + 0.01 * torch.randn(v.shape, generator=g)
                                                         for k, v in mine.items()})) for i in range(3 * MAX_EXACT)]
    got = index.candidates(me, crowd + [("original", index.entry("o", lambda: original))], 0.97)
    assert ("original", False) in got and len(got) == 3 * MAX_EXACT + 1


@pytest.mark.unit
def test_the_exact_band_holds_every_copy_and_rules_out_what_is_far_from_one():
    """core/sketch.py may_copy_many: pairs at a cosine just over the threshold are always kept (whatever
    secret seed), honest pairs of concurrent deltas (cosine ~0.85) are not."""
    import math
    import secrets

    from woolf.core.sketch import matrix, may_copy_many, sketch

    g = torch.Generator().manual_seed(5)
    for cos, want in ((0.9701, True), (0.85, False)):
        for _ in range(40):
            a, e = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
            e -= (e.flatten() @ a.flatten()) / (a.flatten() @ a.flatten()) * a
            b = cos * a / a.norm() + math.sqrt(1 - cos * cos) * e / e.norm()  # mine, at exactly ``cos``
            seed = secrets.token_bytes(32)
            kept = may_copy_many(matrix(sketch({"w": b}, seed)), torch.tensor([float(b.double().norm() ** 2)]),
                                 matrix(sketch({"w": a}, seed)).unsqueeze(0), 0.97)
            assert bool(kept[0]) is want, cos


def test_slow_url_deltas_neither_block_nor_crowd_the_original_out_of_the_copy_check(make_net, monkeypatch):
    """Four keyless PRs whose delta URLs trickle, received before an honest keyless PR whose URL is quick:
    the copy check downloads every URL delta at once, each in its own thread, once a pass within the
    copy-fetch budget (validator/copyfetch.py), so the signed copy is still refused as the original's."""
    import hashlib

    from safetensors.torch import save

    from tests.crafting import random_delta
    from tests.e2e.test_keyless_budget import Trickle
    from woolf.validator import copyfetch, intake

    monkeypatch.setattr(copyfetch, "COPY_FETCH_SECONDS", 2.0)  # the product's 30 s, shortened
    monkeypatch.setattr(intake, "KEYLESS_SECONDS", 2.0)
    net = make_net(**{"forge.delta_schemes": '["https", "http"]'})
    val, dave, mal = net.clone("val"), net.clone("dave"), net.clone("alice")
    with Trickle() as slow, _Files(net.root / "storage") as files:
        for i in range(4):
            data = save(random_delta(mal, scale=0.001, seed=i))
            d = {"kind": "dense", "sha256": hashlib.sha256(data).hexdigest(), "md5": hashlib.md5(data).hexdigest(),
                 "size": len(data), "url": f"{slow.url}/d{i}"}
            craft_pr(mal, raw=data, meta_patch={"delta": d}, who=f"slow{i}", sign_key=False)
        honest = net.train_submit(dave, "dave", delta_url_base=files.url)["id"]
        pr = next(p for p in LocalForge.for_ledger(val).list() if p.id == honest)
        stolen = craft_pr(mal, tensors=_stolen_copy(val, pr), who="alice")  # signed: judged first
        verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
        hits = slow.hits
    assert not verdicts[stolen].accepted and "a copy of PR " + honest in verdicts[stolen].reason, \
        verdicts[stolen].reason
    assert verdicts[honest].accepted, verdicts[honest].reason
    assert hits <= 4 + 4, hits  # each slow URL tried once by the copy check and at most once as itself


def test_a_lora_pr_is_expanded_once_however_many_later_prs_are_compared_with_it(make_net, monkeypatch):
    """Each exact comparison with an earlier LoRA PR expanded its every target again (O(r·rows·cols) each):
    a PR that many later PRs resemble cost the validator one expansion per comparison. They are compared
    in factor space (core/scores.py similarity): its own judgment expands it once, and nothing after."""
    import hashlib

    import woolf.storage.kinds.lora_file as lora_mod
    from woolf.core.lora import expand
    from woolf.forges import forge_for
    from woolf.ledger.submission import SubmitDeltaOptions, submit_delta
    from woolf.storage.kinds.lora_file import LoraFile
    from woolf.storage.weights import spec_of

    net = make_net(**{"delta.accept": '["dense", "topk", "lora"]', "policy.min_improvement": "-10",
                      "scoring.uniqueness": "off", "scoring.min_effect": "0"})
    val = net.clone("val")
    spec = spec_of(val.load_weights(val.show(0)))
    targets = sorted(n for n, (dt, shape) in spec.items() if n.startswith("blocks") and len(shape) == 2)
    g = torch.Generator().manual_seed(0)
    factors = {t: (0.05 * torch.randn(4, spec[t][1][1], generator=g), 0.05 * torch.randn(spec[t][1][0], 4, generator=g),
                   2.0) for t in targets}

    def send(who, pairs):
        led = net.clone(who)
        f = LoraFile(pairs, spec, led.config.limits.max_lora_rank)
        return submit_delta(led, f, led.show(0), SubmitDeltaOptions(who=who, the_forge=forge_for(led, None)))["id"]

    original = send("alice", factors)
    copies = [send(who, {t: (A * c, B / c + 1e-5 * torch.randn(B.shape, generator=g), s)  # other bytes, cosine ~1
                         for t, (A, B, s) in factors.items()}) for who, c in (("bob", 3.0), ("carol", 5.0))]
    fingerprint = lambda A: hashlib.sha256(A.contiguous().numpy().tobytes()).hexdigest()  # noqa: E731
    expanded = []
    monkeypatch.setattr(lora_mod, "expand", lambda A, B, s: expanded.append(fingerprint(A)) or expand(A, B, s))
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert verdicts[original].state == "merged", verdicts[original].reason
    for pr in copies:
        assert verdicts[pr].reason.startswith("a copy of merged PR " + original), verdicts[pr].reason
    assert len(targets) == 4 and [expanded.count(fingerprint(A)) for A, _, _ in factors.values()] == [1] * 4
