"""A proof's format and rules (woolf/protocol/proof.py): every way a chain can fail to prove its PR."""

from __future__ import annotations

import copy
import hashlib

import pytest

from woolf.protocol.proof import (
    EMPTY,
    MAX_LINKS,
    chain_head,
    check_proof,
    draw_segments,
    effective_every,
    fingerprint,
    link_steps,
    make_proof,
    same_class,
    segment_digest,
    state_digest,
)

pytestmark = pytest.mark.unit
H = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(300)]


def _proof(steps=10, every=4, delta=H[99], version=3, follow=None):
    start = {"params": H[0], "opt": EMPTY, "data": H[1], "rng": H[2], "version": version, "carried": None}
    at = link_steps(steps, every)
    links = [[state_digest({c: start[c] for c in ("params", "opt", "data", "rng")}), ""]]
    links += [[H[10 + i], H[50 + i]] for i in range(1, len(at))]
    end = {"opt": H[3], "residual_in": None, "residual_out": None, "delta": delta}
    return make_proof(every=every, device_class={"device": "cpu", "threads": 2}, start=start, links=links,
                      end=end, follow=follow)


def test_links_every_k_steps_bounded_in_number():
    assert link_steps(10, 4) == [0, 4, 8, 10] and link_steps(8, 4) == [0, 4, 8]
    assert effective_every(0, 64) == 4 and effective_every(0, 5) == 1 and effective_every(3, 30) == 3
    assert len(link_steps(10_000, effective_every(1, 10_000))) <= MAX_LINKS  # a long run raises k
    assert fingerprint(2.5, 1.0) == "40200000" + "3f800000"  # 2.5f and 1.0f, big-endian bits
    assert segment_digest(["a", "b"]) != segment_digest(["b", "a"])


def test_an_honest_proof_passes_and_its_head_is_its_chain():
    p = _proof()
    assert check_proof(p, steps=10, delta_sha256=H[99], base_version=3) is None
    assert p["head"] == chain_head(p["links"], p["start"], p["end"])


@pytest.mark.parametrize("case, expect", [
    ("other delta", "does not end at the delta"),
    ("short chain", "do not cover the 20 declared steps"),
    ("edited link", "its proof's head is not the chain"),
    ("start", "its chain's first link is not its declared start"),
    ("malformed", "its proof is malformed (link 2"),
    ("no head", "malformed (head"),
    ("base", "do not rise to the PR's base version 3"),
    ("follow order", "not increasing steps"),
    ("class", "malformed (class"),
])
def test_each_broken_proof_gets_one_line(case, expect):
    p = copy.deepcopy(_proof())
    delta, steps = H[99], 10
    if case == "other delta":
        delta = H[98]
    elif case == "short chain":
        steps = 20
    elif case == "edited link":
        p["links"][2][0] = H[200]
    elif case == "start":
        p["start"]["data"] = H[201]
        p["head"] = chain_head(p["links"], p["start"], p["end"])
    elif case == "malformed":
        p["links"][2] = ["x", H[1]]
    elif case == "no head":
        del p["head"]
    elif case == "base":
        p["start"]["version"] = 2
        p["head"] = chain_head(p["links"], p["start"], p["end"])
    elif case == "follow order":
        p = _proof(version=1, follow=[[8, 2], [4, 3]])
    elif case == "class":
        p["class"] = {"device": ["cpu"]}
    assert expect in check_proof(p, steps=steps, delta_sha256=delta, base_version=3)


def test_a_followed_run_rises_from_its_start_to_its_base():
    p = _proof(version=1, follow=[[4, 2], [10, 3]])
    assert check_proof(p, steps=10, delta_sha256=H[99], base_version=3) is None
    assert "do not rise" in check_proof(p, steps=10, delta_sha256=H[99], base_version=2)


def test_the_audited_segments_always_end_with_the_last():
    picks = [draw_segments(bytes([i]), 16, 2) for i in range(200)]
    assert all(len(p) == 3 and p[-1] == 15 and len(set(p)) == 3 for p in picks)
    assert len({tuple(p) for p in picks}) > 50  # the draw decides the others
    assert draw_segments(b"x", 1, 3) == [0] and draw_segments(b"x", 3, 9) == [0, 1, 2]
    counts = [sum(i in p for p in picks) for i in range(15)]
    assert min(counts) > 10  # every segment gets audited now and then


def test_a_replay_is_bit_exact_only_within_its_class():
    a = {"device": "cpu", "torch": "2.13.0", "capability": "AVX512", "threads": 2, "autocast": "off"}
    assert same_class(a, {**a, "threads": 1})  # the replay adopts the thread count
    assert not same_class(a, {**a, "capability": "AVX2"})
    assert not same_class(a, {**a, "device": "cuda", "gpu": "H100 sm_90"})
