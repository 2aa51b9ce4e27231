"""The demo's and the report's words: best vs final version, regressing merges, rejection kinds."""

from __future__ import annotations

import pytest

from woolf.demo.regimes import REGIMES
from woolf.forges.base import PullRequest
from woolf.protocol.versions import Version
from woolf.report.story import (
    activity,
    facts_sentence,
    joining_sentence,
    regime_sentence,
    rejection_kind,
    rejection_kinds,
    version_facts,
)

pytestmark = pytest.mark.unit


def _v(n, loss):
    return Version(n, f"{n:040x}", 0, "s", metrics=None if loss is None else {"loss": loss})


def test_best_final_and_regressing_merges():
    facts = version_facts([_v(0, 5.0), _v(1, 3.0), _v(2, 3.1), _v(3, 2.9), _v(4, 2.95), _v(5, None)])
    assert facts["best_version"] == 3 and facts["best_loss"] == 2.9
    assert facts["final_version"] == 5 and facts["final_loss"] is None  # the newest has no metrics
    assert facts["merges"] == 4 and facts["regressing_merges"] == 2
    facts = version_facts([_v(0, 5.0), _v(1, 3.0), _v(2, 3.2)])
    text = facts_sentence(facts)
    assert "best version 1 (loss 3.0000)" in text and "final version 2 (loss 3.2000, 0.2000 above the best)" in text
    assert "1 of 2 merges raised the loss" in text
    assert facts_sentence(version_facts([_v(0, None)])) == "no version has a recorded benchmark loss"
    assert version_facts([])["best_version"] is None


def test_rejections_grouped_by_kind_and_activity():
    def pr(who, state, reason=None):
        p = PullRequest(id=f"x-{who}", head="0" * 40, state=state)
        p.contributor, p.reason = who, reason
        return p

    prs = [pr("a", "rejected", "loss 2.6 -> 2.7: improvement -0.1 is below the required -0.0100"),
           pr("b", "rejected", "staleness 9 is over the ledger's max_staleness 8; train from a newer version"),
           pr("b", "rejected", "loss 2.5 -> 2.9: improvement -0.4 is below the required -0.0100"),
           pr("a", "merged"), pr("c", "open"), pr("c", "rejected", "something\nnew: with [markup]")]
    assert rejection_kinds(prs) == {"the benchmark got worse than the gate tolerates (policy.min_improvement)": 2, "too stale": 1, "something new": 1}
    assert rejection_kind(None) == "no reason given" and len(rejection_kind("z" * 500)) == 60
    audit = "retrain: step 8 of 15 does not replay (segment 7, steps 8-8): its loss and gradient norm are not ..."
    assert rejection_kind(audit) == "refused by the proof of training (retrain: ...)"  # not a replayed delta
    assert rejection_kind("replay: the same tensors were already merged as version 3") == "a replay of a merged delta"
    assert activity(prs)["b"] == {"merged": 0, "rejected": 2, "open": 0, "withdrawn": 0}
    assert list(activity(prs)) == ["a", "b", "c"]


def test_summary_and_report_name_the_regime_in_words():
    from woolf.cli.demo.commands import demo

    choices = next(p for p in demo.params if p.name == "regime").type.choices
    assert list(choices) == list(REGIMES)
    demo_json = {"regime": "continued-domain", "regime_words": REGIMES["continued-domain"].words,
                 "final_loss": 1.88, "alone_loss": 1.93, "parallel_loss": 1.83}
    assert regime_sentence(demo_json) == ("Each participant trains on its own data, continuing a pretrained "
                                          "model (`woolf demo --regime continued-domain`).")
    assert joining_sentence(demo_json).startswith("joining paid") and "50%" in joining_sentence(demo_json)
    assert regime_sentence({}) is None and joining_sentence({"final_loss": 2.0}) is None
    assert joining_sentence({**demo_json, "final_loss": 1.95}).startswith("joining did not pay")
