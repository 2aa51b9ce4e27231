"""Issue 35: main stays in memory across a pass and `--watch` (the version this validator merged last).

A pass over several PRs merges each onto the candidate it wrote and pushed for the one before, instead of
reading main again; these tests hold it to what reading main again gives: the same versions and trailers,
and main that moved under the validator (another validator merged meanwhile) read again, never merged onto
the stale copy. A copy left by a PR whose merge was written into main's memory and then refused is never
kept. (What a crash mid-merge leaves: tests/e2e/test_validator_races.py, with main resident alike.)
"""

from __future__ import annotations

import torch

from tests.conftest import make_network
from tests.crafting import craft_pr, craft_prs
from tests.validator.test_validator import _delta
from woolf.audit.recompute import audit
from woolf.protocol.trailers import parse_message
from woolf.validator import Validator

IDS = [f"20261129T00000{i}000Z-p{i}-0000000{i}" for i in range(3)]
VARY = {"Woolf-Timings"}  # seconds differ from run to run


def _versions(ledger) -> list[tuple[str, dict]]:
    """(weights md5, trailers but timings) of every version on the hub's main, oldest first."""
    ledger.fetch()
    out = []
    for v in reversed(ledger.log()):
        msg = ledger.git.out("log", "-1", "--format=%B", v.commit)
        trailers = {k: val for k, val in parse_message(msg)[1].items() if k not in VARY}
        out.append((ledger.pointer(v.commit).md5, trailers))
    return out


def _three_prs(net):
    sub = net.clone("sub")
    craft_prs(sub, [{"tensors": _delta(sub, seed=i), "who": f"p{i}", "sub_id": sub_id} for i, sub_id in enumerate(IDS)])


def test_a_pass_over_three_prs_gives_the_versions_of_three_fresh_validators(tmp_path):
    off = {"scoring.enabled": "false"}  # scoring draws its random shards from a fresh seed each time
    one_pass, fresh = make_network(tmp_path / "a", **off), make_network(tmp_path / "b", **off)
    for net in (one_pass, fresh):
        _three_prs(net)
    val = one_pass.clone("val")
    v = Validator(val, device="cpu", name="v")
    assert [x.state for x in v.run()] == ["merged"] * 3
    assert v.state.resident is not None and v.state.resident.commit == val.head().commit
    other = fresh.clone("val")
    for sub_id in IDS:  # a new validator each time: main read from storage, nothing carried over
        [verdict] = Validator(other, device="cpu", name="v").run(ids=[sub_id])
        assert verdict.state == "merged", verdict.reason
    mine, theirs = _versions(val), _versions(other)
    for (md5, a), (md5b, b) in zip(mine, theirs, strict=True):  # byte-identical weights, the same trailers
        assert md5 == md5b and a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
    assert audit(val).ok


def test_main_moved_by_another_validator_is_read_again_not_merged_onto_the_stale_copy(network):
    sub, v1, v2 = network.clone("sub"), network.clone("v1"), network.clone("v2")
    first = Validator(v1, device="cpu", name="v1")  # as `--watch`: one Validator, pass after pass
    craft_pr(sub, tensors=_delta(sub, seed=0), who="p0")
    assert [x.state for x in first.run()] == ["merged"]
    stale = first.state.resident.commit
    craft_pr(sub, tensors=_delta(sub, seed=1), who="p1")
    assert [x.state for x in Validator(v2, device="cpu", name="v2").run()] == ["merged"]  # main moved
    craft_pr(sub, tensors=_delta(sub, seed=2), who="p2")
    [verdict] = first.run()
    assert verdict.state == "merged" and verdict.version == 3 and verdict.base_version == 2
    assert first.state.resident.commit != stale
    report = audit(v1)  # version 3 recomputed from version 2 and its delta: the same sha256
    assert report.ok, report.problems


def test_a_refused_merge_never_stays_as_main_and_a_refused_check_keeps_main(make_net):
    net = make_net(**{"policy.min_improvement": "1e9"})  # every merge is refused by the gate, after it is made
    sub, val = net.clone("sub"), net.clone("val")
    v = Validator(val, device="cpu", name="v")
    main = val.load_weights(val.head("refs/remotes/origin/main"))
    v.state.resident = None
    craft_pr(sub, tensors=_delta(sub, seed=0), who="p0")
    [verdict] = v.run()
    assert verdict.state == "rejected" and "improvement" in verdict.reason
    assert v.state.resident is None  # main's memory held the refused candidate: dropped, read again next
    craft_pr(sub, tensors={k: torch.zeros_like(t) for k, t in main.items()}, who="p1")  # a no-op: the checks
    [verdict] = v.run()
    assert verdict.state == "rejected" and "no-op" in verdict.reason, verdict.reason
    kept = v.state.resident  # refused before the merge: main's weights untouched, kept for the next PR
    assert kept is not None and kept.commit == val.head().commit
    assert all(torch.equal(kept.weights[k], main[k]) for k in main)


def test_a_stale_pr_with_scoring_off_merges_onto_resident_main_without_reading_it_again(make_net):
    """Issue 35: scoring reads a stale PR's base version, so main's weights were dropped and read again
    for it; with scoring off nothing reads the base, and main stays resident (PRs 2 and 3 of a pass are
    stale: their base is the version before the first merge)."""
    net = make_net(**{"scoring.enabled": "false"})
    sub, val = net.clone("sub"), net.clone("val")
    craft_prs(sub, [{"tensors": _delta(sub, seed=i), "who": f"p{i}", "sub_id": sub_id}
                    for i, sub_id in enumerate(IDS[:2])])
    reads = []
    load = val.load_weights

    def counted(version, *a, **kw):
        reads.append(version.commit)
        return load(version, *a, **kw)

    val.load_weights = counted
    verdicts = Validator(val, device="cpu", name="v").run()
    assert [(v.state, v.staleness) for v in verdicts] == [("merged", 0), ("merged", 1)]
    assert len(reads) == 1  # main read once, for the first PR; the second merges onto the resident copy
    assert audit(val).ok
