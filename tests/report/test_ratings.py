"""Ratings, the leaderboard and credit: pure functions of the verdict history in git (issue 13)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import key_for, run_cli
from tests.crafting import craft_pr
from tests.validator.test_scoring import _noise, _trained
from woolf.core.fairness import canonical
from woolf.core.ratings import rate
from woolf.core.scores import rank_score
from woolf.ledger.verdicts import Record
from woolf.report.board import credit, leaderboard
from woolf.validator import Validator


@pytest.mark.unit
def test_ratings_rank_by_score_and_tolerate_unscored_history():
    honest = [("alice", "merged", {"difference": 0.3}), ("bob", "merged", {"difference": 0.1})]
    cheats = [("eve", "merged", {"difference": -0.4}),  # a free-rider, marked but merged
              ("mallory", "rejected", None),  # written before scores existed: rated from what it has
              ("trent", "rejected", {"assigned": -0.2, "random": -0.1, "difference": -0.1})]
    history = (honest + cheats) * 6
    table, timeline = rate(history, window=5)
    order = sorted(table, key=lambda w: -table[w].ordinal)
    assert order[:2] == ["alice", "bob"] and set(order[2:]) == {"eve", "mallory", "trent"}
    assert table["alice"].windows == 6 and len(timeline) == 6
    assert rate(history, window=5)[0]["alice"].mu == table["alice"].mu  # deterministic
    assert rank_score("rejected", {"difference": 0.3}) > rank_score("merged", None) > rank_score("rejected", None)
    assert rank_score("merged", {"difference": 99.0}) == 5.0  # one verdict cannot buy a rating
    assert rank_score("merged", {"difference": float("nan")}) == rank_score("merged", None)
    # one contributor alone learns nothing
    alone, tl = rate([("alice", "merged", {"difference": 1.0})] * 4, window=2)
    assert alone["alice"].windows == 0 and tl == []


class _Led:  # the two things credit and leaderboard read from a ledger's config
    class config:  # noqa: N801
        class policy:  # noqa: N801
            metric, direction = "loss", "minimize"


@pytest.mark.unit
def test_credit_counts_regressions_against_their_author():
    recs = [Record("a1", "alice", "merged", 1, version=1, before={"loss": 3.0}, after={"loss": 2.5}),
            Record("b1", "bob", "merged", 2, version=2, before={"loss": 2.5}, after={"loss": 2.4}),
            Record("e1", "eve", "merged", 3, version=3, before={"loss": 2.4}, after={"loss": 2.45}),
            Record("x", "bob", "merged", 4, version=4, before=None, after={"loss": 2.4})]  # no record: skipped
    c = credit(_Led, records=recs)
    by = {r["contributor"]: r for r in c["rows"]}
    assert abs(c["total"] - 0.55) < 1e-12 and c["versions"] == 3
    assert abs(by["alice"]["share"] - 0.5 / 0.55) < 1e-12 and by["eve"]["improvement"] < 0
    assert by["eve"]["regressions"] == 1 and [r["contributor"] for r in c["rows"]] == ["alice", "bob", "eve"]
    assert credit(_Led, since=1, records=recs)["versions"] == 2
    board = leaderboard(_Led, history=[Record("r", canonical("ＡＬＩＣＥ"), "rejected", 5)] + recs)
    assert {r["contributor"] for r in board["rows"]} == {"alice", "bob", "eve"}


@pytest.mark.slow  # CLI subprocesses and the HTML report
def test_leaderboard_and_credit_commands_on_a_real_ledger(network):
    val = network.clone("val")
    for who in ("alice", "bob", "alice"):
        craft_pr(val, tensors=_trained(val, who), who=who)
        Validator(val, device="cpu", name="v1").run()
    # a submission.json whose contributor is not the id's (here alice in another case and Unicode form) is
    # rejected by schema and charged to nobody: junk claiming a name costs its owner nothing
    craft_pr(val, tensors=_noise(val, seed=5), meta_patch={"contributor": "ＡＬＩＣＥ"})
    [v] = Validator(val, device="cpu", name="v1").run()
    assert not v.accepted and v.scores is None
    out = run_cli("leaderboard", "--json", cwd=val.root)
    assert out.returncode == 0, out.stderr
    rows = {r["contributor"]: r for r in json.loads(out.stdout)["rows"]}
    assert rows["alice"]["merged"] == 2 and rows["alice"]["rejected"] == 0 and rows["bob"]["merged"] == 1
    assert "ＡＬＩＣＥ" not in rows
    assert all(rows[w]["ordinal"] is not None for w in ("alice", "bob"))
    out = run_cli("credit", "--json", "--since", "1", cwd=val.root)
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["versions"] == 2 and {r["contributor"] for r in data["rows"]} == {"alice", "bob"}
    human = run_cli("credit", cwd=val.root)
    assert human.returncode == 0 and "alice" in human.stdout and "total loss improvement" in human.stdout
    from woolf.report.build import build_report

    paths = build_report(val, val.root / "report")
    page = paths["html"].read_text()
    assert "id='leaderboard'" in page and "id='credit'" in page and "ratings.png" in str(paths["plots"][-1])
    assert "## Leaderboard" in paths["markdown"].read_text()


@pytest.mark.unit
def test_demo_summary_names_what_each_contributor_got():
    from woolf.cli.demo_cmds import outcome_lines
    from woolf.demo.run import DemoResult

    r = DemoResult("d", 2, 1, 1, 5, adversaries=["noise"], honest_above_adversaries=True, outcomes={
        "p1": {"merged": 3, "rejected": 1, "marked": 0, "rating": 4.2, "adversary": False},
        "noise": {"merged": 0, "rejected": 4, "marked": 0, "rating": None, "adversary": True}})
    lines = outcome_lines(r)
    assert "p1" in lines[1] and "honest" in lines[1] and "noise" in lines[2] and "rating -" in lines[2]
    assert lines[-1].endswith("yes") and outcome_lines(DemoResult("d", 1, 1, 1, 1)) == []


@pytest.mark.unit
def test_a_pr_too_stale_by_its_turn_is_not_held_against_its_contributor():
    stale = Record("s", "bob", "rejected", 1, reason="staleness 17 is over the ledger's max_staleness 16; train again")
    copy = Record("c", "bob", "rejected", 2, reason="a copy of PR x, open and received earlier: cosine +0.99")
    flood = Record("f", "bob", "rejected", 3, reason="over the open-PR limit: contributor 'bob' had 6 open PRs "
                                                    "when the queue was read, over the limit of 4; ...")
    assert not stale.rated and copy.rated and not flood.rated  # a name without a key may be anyone's claim
    assert Record("m", "bob", "merged", 4).rated


def test_unsigned_prs_in_a_keyed_name_are_nobodys(network):
    """Issue 25, breach 3: junk PRs whose id and submission.json name alice (who has a key in
    allowed_signers), unsigned or signed by another key, were hers and sank her rating. Now they are
    nobody's: not listed as hers, not charged to her on the leaderboard."""
    val = network.clone("val")
    craft_pr(val, tensors=_trained(val, "alice"), who="alice")  # alice's own, signed with her key
    Validator(val, device="cpu", name="v1").run()
    junk = [craft_pr(val, tensors=_noise(val, scale=0.5, seed=s), who="alice", sign_key=key)
            for s, key in ((1, False), (2, False), (3, key_for("bob")))]
    from woolf.forges.local import LocalForge

    assert {LocalForge.for_ledger(val).get(j).contributor for j in junk} == {None}
    verdicts = Validator(val, device="cpu", name="v1").run()
    assert sorted(v.id for v in verdicts) == sorted(junk)  # merged or rejected: none of it is hers
    rows = {r["contributor"]: r for r in leaderboard(val)["rows"]}
    assert rows["alice"]["merged"] == 1 and rows["alice"]["rejected"] == 0, rows["alice"]
