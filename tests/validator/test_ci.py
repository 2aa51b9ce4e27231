"""The CI split's apply step trusts nothing in the artifact that it can compute itself."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import git, make_network
from tests.crafting import craft_pr
from tests.hostile_corpus import delta
from woolf.errors import UsageError
from woolf.forges.local import LocalForge
from woolf.validator import Validator
from woolf.validator.ci import apply_record, check_record, evaluate_pr

# a zero delta is a no-op the validator refuses by default (issue 13); off here, the record is the subject
SETTINGS = {"policy.min_improvement": "0.0", "limits.min_delta_norm_ratio": "0", "scoring.min_effect": "0"}


@pytest.fixture
def evaluated(make_net):
    net = make_net(**SETTINGS)
    val = net.clone("val")
    good = craft_pr(val, tensors=delta(val, scale=0.0), who="alice")  # a zero delta: no gain, no loss
    bad = craft_pr(val, tensors=delta(val, scale=0.5, seed=1), who="bob")  # the benchmark rejects it
    v = Validator(val, device="cpu")
    return net, val, {"good": evaluate_pr(v, good), "bad": evaluate_pr(v, bad)}


@pytest.fixture(scope="module")
def good_record(tmp_path_factory) -> dict:
    """The evaluated fixture's "good" record, made once: the type checks only read it (a network each
    cost ten networks, twenty pushes and twenty evaluations)."""
    net = make_network(tmp_path_factory.mktemp("ci"), **SETTINGS)
    val = net.clone("val")
    return evaluate_pr(Validator(val, device="cpu"), craft_pr(val, tensors=delta(val, scale=0.0), who="alice"))


def _apply(val, record):
    return apply_record(Validator(val, device="cpu"), record)


@pytest.mark.parametrize("field,value,needle", [
    ("accepted", 1, "bad accepted"),
    ("attenuation", float("nan"), "bad attenuation"),
    ("metrics", {"before": {"loss": "2.0"}, "after": None}, "bad metrics"),
    ("head", "HEAD", "bad head"),
    ("id", "../../x", "bad id"),
    ("timings", {"fetch": [1]}, "bad timings"),
    ("contributor", "[/red]", "bad contributor"),
    ("candidate_sha256", "0" * 63, "bad candidate_sha256"),
    ("device", "cpu\nWoolf-Version: 9", "bad device"),
    ("device", "x" * 201, "bad device"),
])
def test_record_fields_are_type_checked(good_record, field, value, needle):
    record = {**good_record, field: value}
    with pytest.raises(UsageError, match=needle):
        check_record(record)


def test_flipped_artifact_merges_nothing(evaluated):
    net, val, records = evaluated
    main = git("rev-parse", "main", cwd=net.hub)
    bad = records["bad"]
    assert not bad["accepted"] and bad["candidate_sha256"] is None
    flipped = {**bad, "accepted": True, "candidate_sha256": "0" * 64}
    with pytest.raises(UsageError, match="its own metrics fail the ledger's policy"):
        _apply(val, flipped)
    # metrics forged to pass as well: the candidate recomputed from the delta is not the evaluated one
    forged = copy.deepcopy(flipped)
    forged["metrics"]["after"] = forged["metrics"]["before"]
    with pytest.raises(UsageError, match="candidate differs"):
        _apply(val, forged)
    att = {**records["good"], "attenuation": 2.0}
    with pytest.raises(UsageError, match="staleness or attenuation"):
        _apply(val, att)
    assert git("rev-parse", "main", cwd=net.hub) == main
    assert {p.state for p in LocalForge.for_ledger(val).list()} == {"open"}


def test_apply_merges(evaluated):
    net, val, records = evaluated
    done = _apply(val, records["good"])
    assert done.accepted and done.version == 1 and git("rev-parse", "main^2", cwd=net.hub) == records["good"]["head"]


def test_a_record_older_than_main_is_requeued_then_swept(evaluated):
    net, val, records = evaluated
    stale = records["good"]
    other = craft_pr(val, tensors=delta(val, scale=0.0, seed=3), who="carol")
    [first] = Validator(val, device="cpu").run(ids=[other])  # main moves after the record was written
    assert first.accepted
    requeued = _apply(val, stale)
    assert requeued.state == "requeued" and "main moved since evaluation" in requeued.reason
    assert LocalForge.for_ledger(val).get(stale["id"]).state == "open"  # nothing lost, nothing failed
    [again] = Validator(val, device="cpu").run(ids=[stale["id"]])  # what the sweeper does next
    assert again.id == stale["id"] and again.state in ("merged", "rejected")


def test_forged_metrics_recomputed_with_woolfs_own_functions_merge_nothing(evaluated):
    """Issue 25, breach 2: whoever controls the evaluate job recomputes staleness, attenuation and the
    candidate sha256 with woolf's functions and invents the metrics; the merge job measures again."""
    from woolf.validator.admission import admit
    from woolf.validator.ci import candidate_sha256

    net, val, records = evaluated
    main = git("rev-parse", "main", cwd=net.hub)
    bad = records["bad"]
    from woolf.validator.stages import merged_deltas
    from woolf.validator.step import candidate, fresh

    ctx = Validator(val, device="cpu").ctx
    pr, head = fresh(ctx, bad["id"])
    adm = admit(val, pr, head, merged_deltas(ctx, head))
    _, step = candidate(ctx, adm, head, bad["attenuation"], __import__("woolf.timing").timing.Timer())
    forged = copy.deepcopy(bad)
    before = forged["metrics"]["before"]["loss"]
    forged.update(accepted=True, candidate_sha256=candidate_sha256(step), reason="improved")
    forged["metrics"]["after"] = {"loss": before - 0.5}
    with pytest.raises(UsageError, match="is not what this job measured"):
        _apply(val, forged)
    assert git("rev-parse", "main", cwd=net.hub) == main
    assert LocalForge.for_ledger(val).get(bad["id"]).state == "open"
