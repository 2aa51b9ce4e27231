"""The report says the demo's verdict in words, leaves out what did not happen, and captions every plot."""

from __future__ import annotations

from woolf.report.build import CAPTIONS, build_report


def test_report_carries_the_verdict_and_no_false_flags(network, tmp_path):
    demo = {"genesis_loss": 5.76, "final_loss": 2.43, "alone_loss": 2.62, "alone_loss_mean": 2.62,
            "parallel_loss": 2.40, "interrupted": False, "participants": 1}
    paths = build_report(network.work, tmp_path / "report", demo=demo)
    md, page = paths["markdown"].read_text(), paths["html"].read_text()
    said = "joining paid: the ledger ends 0.1900 below the best participant alone"
    assert said in md and said in page
    assert ">interrupted<" not in page  # a demo that was not interrupted says nothing about it
    for plot in paths["plots"]:
        assert plot.stem in CAPTIONS, plot.stem  # no plot is captioned by its file name
    assert "ratings" in CAPTIONS
