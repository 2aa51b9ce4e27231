"""The report's scoring section: leaderboard table, ratings over time (plot and table), credit table.

Usage:
    part = scoring_section(ledger, out_dir)      # part.plot (PNG path or None), part.html, part.markdown
    head, rows = over_time(board["timeline"], [r["contributor"] for r in board["rows"]])
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from woolf.ledger.verdicts import merged_records, verdict_history
from woolf.report.board import credit, leaderboard
from woolf.report.story import MARKED_AND_RANDOM


@dataclass
class Section:
    plot: Path | None
    html: str
    markdown: str
    board: dict
    credit: dict


def _num(x, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def _plot(timeline: list[dict], out: Path) -> Path | None:
    if not timeline:
        return None
    import matplotlib.pyplot as plt  # deferred: matplotlib

    who = sorted({w for t in timeline for w in t["ratings"]})
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for w in who:
        pts = [(t["end"], t["ratings"][w]) for t in timeline if w in t["ratings"]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=w)
    ax.set_xlabel("verdicts")
    ax.set_ylabel("rating (ordinal, mu - 3 sigma)")
    ax.set_title("Contributor ratings over time (OpenSkill Plackett-Luce)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    path = out / "ratings.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


OVER_TIME_ROWS = 12  # windows listed in the ratings-over-time table (evenly spread, the last always)


def over_time(timeline: list[dict], who: list[str], limit: int = OVER_TIME_ROWS) -> tuple[tuple, list[tuple]]:
    """The ratings-over-time table: one row per listed window (the verdicts so far, then each contributor's
    ordinal after it, "-" before its first match); at most ``limit`` rows, evenly spread, the last included."""
    if not timeline:
        return (), []
    n, m = len(timeline), max(1, min(len(timeline), limit))
    picks = sorted({round(i * (n - 1) / max(1, m - 1)) for i in range(m)} | {n - 1})
    last: dict[str, float] = {}
    rows, at = [], 0
    for i in picks:  # a contributor's rating stays what it was until its next match
        for t in timeline[at:i + 1]:
            last.update(t["ratings"])
        at = i + 1
        rows.append((str(timeline[i]["end"]), *(_num(last.get(w), "{:.2f}") for w in who)))
    return ("verdicts", *who), rows


def scoring_section(ledger, out: Path) -> Section:
    history = verdict_history(ledger)
    board = leaderboard(ledger, history=history)
    shares = credit(ledger, records=merged_records(ledger))
    head = ("contributor", "rating", "mu", "sigma", "merged", "rejected", "marked", "improvement", "assigned-random")
    rows = [(r["contributor"], _num(r["ordinal"], "{:.2f}"), _num(r["mu"], "{:.2f}"), _num(r["sigma"], "{:.2f}"),
             str(r["merged"]), str(r["rejected"]), str(r["flagged"]), _num(r["improvement"], "{:+.4f}"),
             _num(r["mean_difference"], "{:+.4f}")) for r in board["rows"]]
    chead = ("contributor", "share", "credited", "improvement", "versions", "regressions")
    crows = [(r["contributor"], _num(r["share"], "{:.1%}"), _num(r["credited"], "{:+.4f}"),
              _num(r["improvement"], "{:+.4f}"), str(r["versions"]), str(r["regressions"])) for r in shares["rows"]]
    rule = shares["rule"][0].upper() + shares["rule"][1:] + "."
    thead, trows = over_time(board["timeline"], [r["contributor"] for r in board["rows"]])
    shown = len(trows) < len(board["timeline"])
    when = (f"Each contributor's rating (ordinal) after each match of {board['window']} verdicts"
            + (f", {len(trows)} of {len(board['timeline'])} matches shown" if shown else "")
            + ("." if trows else ": no match yet (a match needs two contributors)."))

    def table(tid, h, rs):
        cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rs)
        return f"<table id='{tid}'><tr>" + "".join(f"<th>{c}</th>" for c in h) + f"</tr>{cells}</table>"

    def md(h, rs):
        lines = ["| " + " | ".join(h) + " |", "|" + "---|" * len(h)]
        return lines + ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rs]

    how = (f"OpenSkill Plackett-Luce ratings (beta 7, tau 0.1), one match per {board['window']} verdicts, each "
           "contributor ranked by a moving average of its assigned-minus-random shard improvements, in units of "
           "each window's own noise (the spread between random shards); rejections before evaluation (copies, "
           "no-ops, random deltas, signed floods) rank last. " + MARKED_AND_RANDOM + ".")
    page = (f"<h2>Leaderboard</h2><p>{html.escape(how)}</p>" + table("leaderboard", head, rows)
            + f"<h2>Ratings over time</h2><p>{html.escape(when)}</p>" + (table("ratings-over-time", thead, trows)
                                                                          if trows else "")
            + f"<h2>Credit</h2><p>{html.escape(rule)} Credited {html.escape(shares['metric'])} improvement "
            f"{shares['total']:+.4f} of {shares['improvement']:+.4f} over {shares['versions']} versions.</p>"
            + table("credit", chead, crows))
    text = ["", "## Leaderboard", "", how, "", *md(head, rows), "", "## Ratings over time", "", when, "",
            *(md(thead, trows) + [""] if trows else []), "## Credit", "", rule, "",
            f"total {shares['metric']} improvement {shares['improvement']:+.4f} over {shares['versions']} versions, "
            f"{shares['total']:+.4f} credited", "", *md(chead, crows)]
    return Section(_plot(board["timeline"], out), page, "\n".join(text) + "\n", board, shares)
