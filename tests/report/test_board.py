"""Ratings, the leaderboard and credit (woolf/report/board.py over core/ratings.py): pure functions of the verdict
history in git."""

from __future__ import annotations

import pytest

from tests.conftest import key_for
from tests.crafting import craft_pr
from tests.validator.test_score import _noise, _trained
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
    assert abs(c["improvement"] - 0.55) < 1e-12 and c["versions"] == 3
    # alice's 0.5 is capped at the median of the improving merges around it (0.5 and 0.1: 0.3)
    assert abs(c["total"] - 0.35) < 1e-12 and abs(by["alice"]["credited"] - 0.3) < 1e-12
    assert abs(by["alice"]["share"] - 0.3 / 0.4) < 1e-12 and by["eve"]["improvement"] < 0  # of the positive nets
    assert by["eve"]["regressions"] == 1 and [r["contributor"] for r in c["rows"]] == ["alice", "bob", "eve"]
    assert credit(_Led, since=1, records=recs)["versions"] == 2
    board = leaderboard(_Led, history=[Record("r", canonical("ＡＬＩＣＥ"), "rejected", 5)] + recs)
    assert {r["contributor"] for r in board["rows"]} == {"alice", "bob", "eve"}


@pytest.mark.unit
def test_demo_summary_names_what_each_contributor_got():
    from woolf.cli.demo.commands import outcome_lines
    from woolf.demo.result import DemoResult

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


@pytest.mark.unit
def test_credit_caps_each_merge_at_the_typical_gain_around_it():
    from woolf.report.board import CREDIT_RULE, typical_gains

    def rec(i, who, before, after):
        return Record(f"id{i}", who, "merged", i, version=i, before={"loss": before}, after={"loss": after})

    # the first merge from genesis drops the loss by a whole nat: any delta would have
    losses = [5.8, 4.8, 4.7, 4.64, 4.65, 4.60, 4.55, 4.52, 4.50, 4.20]
    who = ["first", "alice", "bob", "eve", "alice", "bob", "alice", "bob", "carol"]
    recs = [rec(i + 1, w, losses[i], losses[i + 1]) for i, w in enumerate(who)]
    gains = [losses[i] - losses[i + 1] for i in range(len(who))]
    # nearest 8 of version 1 are versions 1-8; their improving gains: 1.0 .1 .06 .05 .05 .03 .02 -> median .05
    caps = typical_gains(gains)
    assert abs(caps[0] - 0.05) < 1e-9 and caps == typical_gains(gains) and typical_gains([-0.1, -0.2]) == [None, None]
    c = credit(_Led, records=list(reversed(recs)))  # newest first, as merged_records gives them
    by = {r["contributor"]: r for r in c["rows"]}
    assert abs(by["first"]["credited"] - 0.05) < 1e-9 and abs(by["first"]["improvement"] - 1.0) < 1e-9
    assert abs(by["eve"]["credited"] + 0.01) < 1e-9  # a regression within the bound counts in full
    # carol's late 0.3 is capped at the median around it (versions 2-9: .1 .06 .05 .05 .03 .02 .3 -> .05)
    assert abs(by["carol"]["credited"] - 0.05) < 1e-9
    assert abs(by["alice"]["credited"] - (0.05 + 0.05 + 0.03)) < 1e-9  # 0.1 capped, 0.05 and 0.03 whole
    assert abs(c["improvement"] - 1.6) < 1e-9 and abs(c["total"] - sum(r["credited"] for r in c["rows"])) < 1e-9
    assert by["first"]["share"] < 0.25 and c["rule"] == CREDIT_RULE  # was 1.0 / 1.6 = 62% of all credit
    assert credit(_Led, since=8, records=recs)["versions"] == 1  # --since counts later versions, capped alike
    assert abs(credit(_Led, since=8, records=recs)["total"] - 0.05) < 1e-9


@pytest.mark.unit
def test_ratings_weigh_differences_by_their_window_noise_and_let_luck_fade():
    from woolf.core.scores import UNSCORED, window_noise

    noisy = [{"difference": 0.3, "randoms": [2.5, 2.9]}, {"difference": -0.2, "randoms": [2.4, 2.0]}]
    quiet = [{"difference": 0.1, "randoms": [0.02, 0.0]}, {"difference": 0.0, "randoms": [0.01, -0.01]}]
    n1, n2 = window_noise(noisy), window_noise(quiet)
    assert abs(n1 - (0.08 * 1.5) ** 0.5) < 1e-9 and n2 < n1 / 10 and window_noise([None, {"difference": 1}]) is None
    # near genesis 0.3 nats is chance; later 0.1 is several noise widths
    assert rank_score("merged", noisy[0], None, n1) < 1 < rank_score("merged", quiet[0], None, n2) <= 5
    assert rank_score("rejected", {"difference": 0.4, "assigned": 0.001},
                      "the delta removes +0.0010 of loss on its own assigned shard, under scoring.min_assigned") == UNSCORED
    # a free-rider lucky once at genesis, then nothing; an honest one steadily ahead afterwards
    r = lambda d, spread: {"difference": d, "randoms": [spread, -spread]}  # noqa: E731
    history = [("rider", "merged", r(0.6, 0.3)), ("honest", "merged", r(-0.3, 0.3))]
    history += [("rider", "merged", r(0.0, 0.05)), ("honest", "merged", r(0.1, 0.05))] * 5
    table, timeline = rate(history, window=2)
    assert timeline[0]["ratings"]["rider"] > timeline[0]["ratings"]["honest"]
    assert table["honest"].ordinal > table["rider"].ordinal


@pytest.mark.unit
def test_a_signed_flood_beyond_twice_the_limit_counts_against_its_key():
    from woolf.validator.screen import FLOOD

    signed = Record("f", "bob", "rejected", 3, reason=f"{FLOOD} 'bob' had 12 signed open PRs when the queue was read")
    assert signed.rated and rank_score(signed.state, signed.scores, signed.reason) < -5


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


@pytest.mark.unit
def test_credit_shares_stay_within_0_and_100_percent_when_regressions_nearly_cancel_the_gains():
    def rec(i, who, before, after):
        return Record(f"id{i}", who, "merged", i, version=i, before={"loss": before}, after={"loss": after})

    # alice +0.3 (credited 0.2, the median of 0.3 and 0.1), bob +0.1, eve -0.19: the signed total 0.11
    # gave alice 182%, bob 91%, eve -173%
    recs = [rec(1, "alice", 3.0, 2.7), rec(2, "bob", 2.7, 2.6), rec(3, "eve", 2.6, 2.79)]
    c = credit(_Led, records=recs)
    by = {r["contributor"]: r for r in c["rows"]}
    assert abs(c["total"] - 0.11) < 1e-9 and abs(by["eve"]["credited"] + 0.19) < 1e-9  # its regression shown
    assert abs(by["alice"]["share"] - 2 / 3) < 1e-9 and abs(by["bob"]["share"] - 1 / 3) < 1e-9
    assert by["eve"]["share"] == 0.0 and all(0.0 <= r["share"] <= 1.0 for r in c["rows"])
    assert abs(sum(r["share"] for r in c["rows"]) - 1.0) < 1e-9
    # nobody's merges helped: no shares at all
    assert all(r["share"] is None for r in credit(_Led, records=[rec(1, "eve", 3.0, 3.1)])["rows"])


@pytest.mark.unit
def test_the_report_lists_each_contributors_rating_over_time():
    from woolf.report.scoring import over_time

    timeline = [{"window": i, "end": 8 * (i + 1), "ratings": {"alice": float(i), "bob": -float(i)}} for i in range(30)]
    timeline[3]["ratings"] = {"alice": 3.0, "carol": 1.5}  # carol's only match; bob sat this one out
    head, rows = over_time(timeline, ["alice", "bob", "carol"], limit=12)
    assert head == ("verdicts", "alice", "bob", "carol") and len(rows) == 12
    assert rows[0] == ("8", "0.00", "-0.00", "-") and rows[-1] == ("240", "29.00", "-29.00", "1.50")
    assert rows[1][0] == "32" and rows[1][2] == "-2.00"  # bob keeps his rating until his next match
    assert over_time(timeline[:2], ["alice"]) == (("verdicts", "alice"), [("8", "0.00"), ("16", "1.00")])
    assert over_time([], ["alice"]) == ((), [])


@pytest.mark.unit
def test_a_match_of_the_honest_pair_alone_cannot_sink_one_below_a_cheat_that_sat_it_out():
    """Seen in the quick adversarial demo (issue 28): the last window held only p1 and p2; p1 lost that
    match and fell below the free-rider, whose record (worse than p1's) was not in it."""
    r = lambda d: {"difference": d, "randoms": [0.01, -0.01]}  # noqa: E731
    first = [("p1", "merged", r(0.05)), ("rider", "merged", r(0.0)), ("p2", "merged", r(0.06)),
             ("copycat", "rejected", None), ("noise", "rejected", None), ("rider", "merged", r(0.001)),
             ("copycat", "rejected", None), ("noise", "rejected", None)]
    history = first + [("p1", "merged", r(0.03)), ("p2", "merged", r(0.06))] * 4
    table, timeline = rate(history, window=8)
    assert table["p1"].ordinal > table["rider"].ordinal  # main: p1 0.05 < rider 0.90
    assert table["p2"].ordinal > table["p1"].ordinal  # p2 still ahead of p1: it won their matches
    assert "rider" in timeline[1]["ratings"]  # the window after its verdicts, with its record as it stood
    more = history + [("p1", "merged", r(0.03)), ("p2", "merged", r(0.06))] * 4
    assert "rider" not in rate(more, window=8)[1][2]["ratings"]  # gone two windows: it plays no more


@pytest.mark.unit
def test_honest_outcomes_never_tie_so_a_cheat_ranked_below_them_cannot_rise_above():
    """Seen in the quick adversarial demo (issue 28): both honest participants' differences were 5-15 noise
    widths, clipped to the same 5.0; openskill's Plackett-Luce gives players tied at the top less than the
    one ranked below them, and the free-rider (third in every match) ended above both."""
    r = lambda d: {"difference": d, "randoms": [0.005, -0.005]}  # noqa: E731 (noise 0.0087)
    window = [("p1", "merged", r(0.08)), ("p2", "merged", r(0.12)), ("rider", "merged", r(0.004)),
              ("copycat", "rejected", None), ("noise", "rejected", None), ("flood", "rejected", None)]
    table, _ = rate(window, window=6)
    assert min(table["p1"].ordinal, table["p2"].ordinal) > table["rider"].ordinal  # main: p1 = p2 < rider
    assert table["p2"].ordinal > table["p1"].ordinal  # and the larger difference wins
    assert rank_score("merged", r(0.08), None, 0.0087) < rank_score("merged", r(0.12), None, 0.0087) < 5.0


@pytest.mark.unit
def test_a_match_holds_about_two_verdicts_of_every_contributor():
    from woolf.core.ratings import match_size

    history = [(w, "merged", {"difference": 0.1}) for w in ["a", "b", "c", "d", "e", "f", "g"] * 3]
    assert match_size(history) == 14 and match_size(history[:4]) == 8 and match_size(history * 0) == 8
    assert match_size([(f"c{i}", "merged", None) for i in range(100)]) == 64
    assert rate(history)[1][0]["end"] == 14  # the default window


@pytest.mark.unit
def test_credit_bounds_regressions_like_gains_so_substantive_work_is_not_charged_for_benchmark_noise():
    """The merges of a quick adversarial demo (issue 28, continued training): honest deltas move the benchmark
    +-0.01 nats, a flooder's and a free-rider's barely; capping only the gains gave p1 and p2 0% of the
    credit and the flooder and free-rider 54% and 46%."""
    seq = [("flooder", .0076), ("p1", .0164), ("flooder", .0005), ("p2", .0096), ("flooder", -.00001),
           ("free-rider", .0013), ("free-rider", .0014), ("p1", .0027), ("p2", .0001), ("p1", .0136),
           ("p2", .0015), ("p1", -.0081), ("p2", -.0085)]
    loss, recs = 1.9365, []
    for i, (who, gain) in enumerate(seq, start=1):
        recs.append(Record(f"id{i}", who, "merged", i, version=i, before={"loss": loss}, after={"loss": loss - gain}))
        loss -= gain
    by = {r["contributor"]: r for r in credit(_Led, records=recs)["rows"]}
    assert by["p1"]["share"] > 0.25 and by["p2"]["share"] > 0.1  # main: 0% each
    assert by["p1"]["share"] + by["p2"]["share"] > 0.5
    assert abs(by["p1"]["credited"] - (0.0027 + 0.0015 + 0.00145 - 0.00145)) < 1e-9  # -0.0081 bounded like +0.0136
