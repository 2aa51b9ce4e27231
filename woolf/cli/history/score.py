"""Who helped: `woolf leaderboard` (OpenSkill ratings) and `woolf credit` (shares of the improvement).

Usage:
    woolf leaderboard [--json] [--window 8]
    woolf credit [--json] [--since V]
"""

from __future__ import annotations

import click

from woolf.cli.app import App, json_option, pass_app


def _ledger(app: App):
    """The ledger as origin has it now (fetched), like `woolf report`: verdicts and main agree."""
    ledger = app.ledger()
    if ledger.has_origin():
        ledger.fetch()
        ledger.main_ref = "refs/remotes/origin/main"
    return ledger


def _f(x, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@click.command()
@click.option("--window", type=click.IntRange(1, 10_000), default=None,
              help="Verdicts per rating match [default: twice the number of contributors, at least 8, at most 64].")
@json_option
@pass_app
def leaderboard(app: App, window, as_json):
    """Contributors by OpenSkill rating (Plackett-Luce, beta 7, tau 0.1), from the verdict history."""
    from woolf.report.board import leaderboard as board  # deferred: fast --help

    data = board(_ledger(app), window=window)
    if as_json:
        app.emit_json(data)
        return
    app.table(["contributor", "ordinal", "mu", "sigma", "merged", "rejected", "marked", "improvement",
               "assigned-random", "retrain-failed"],
              [[r["contributor"], _f(r["ordinal"], "{:.2f}"), _f(r["mu"], "{:.2f}"), _f(r["sigma"], "{:.2f}"),
                str(r["merged"]), str(r["rejected"]), str(r["flagged"]), _f(r["improvement"], "{:+.4f}"),
                 _f(r["mean_difference"], "{:+.4f}"), str(r.get("retrain_failed", 0))] for r in data["rows"]])
    windows, size = len(data["timeline"]), data["window"]
    app.console.print(f"{_n(data['verdicts'], 'verdict')} in {_n(windows, 'rated window')} "
                      f"of {_n(size, 'verdict')}")
    from woolf.report.story import MARKED_AND_RANDOM, RATING_VS_CREDIT  # deferred: fast --help

    app.console.print(MARKED_AND_RANDOM, style="dim")
    app.console.print(RATING_VS_CREDIT, style="dim")


@click.command()
@click.option("--since", type=click.IntRange(0), help="Count only versions after version V.")
@json_option
@pass_app
def credit(app: App, since, as_json):
    """Each contributor's share of the ledger's benchmark improvement (regressions count against)."""
    from woolf.report.board import credit as shares  # deferred: fast --help

    ledger = _ledger(app)
    head = ledger.head().version
    if since is not None and since >= head:
        from woolf.errors import UsageError  # deferred: fast --help

        raise UsageError(f"--since {since}: the ledger's newest version is {head}, so no version comes after it",
                         hint=f"--since 0..{max(head - 1, 0)}")
    data = shares(ledger, since=since)
    if as_json:
        app.emit_json(data)
        return
    app.table(["contributor", "share", "credited", "improvement", "versions", "regressions", "retrain-failed"],
              [[r["contributor"], _f(r["share"], "{:.1%}"), _f(r["credited"], "{:+.4f}"),
                _f(r["improvement"], "{:+.4f}"), str(r["versions"]), str(r["regressions"]),
                str(r.get("retrain_failed", 0))] for r in data["rows"]])
    app.console.print(f"total {data['metric']} improvement {data['improvement']:+.4f} over {data['versions']} versions"
                      + (f" after version {since}" if since is not None else "") + f", {data['total']:+.4f} credited")
    app.console.print(data["rule"][0].upper() + data["rule"][1:] + ".")
    from woolf.report.story import RATING_VS_CREDIT  # deferred: fast --help

    app.console.print(RATING_VS_CREDIT, style="dim")
