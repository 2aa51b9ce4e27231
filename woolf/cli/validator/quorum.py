"""Validators judged by agreement: `woolf validators`.

Usage:
    woolf validators [--json]      # votes, agreement with settled outcomes, median evaluation time
"""

from __future__ import annotations

import click

from woolf.cli.app import App, json_option, pass_app


@click.command()
@json_option
@pass_app
def validators(app: App, as_json):
    """Each validator's votes, agreement with the settled outcomes, median evaluation time."""
    from woolf.report.validators import validators_report  # deferred: fast --help

    report = validators_report(app.ledger())
    if as_json:
        app.emit_json(report)
        return
    if report["quorum"] == 1 and not any(v["votes"] for v in report["validators"]):
        app.console.print("quorum 1: validators cast no votes (one validator's verdict settles a PR), so there "
                          "is no agreement to compare; `woolf pr list` shows who decided what")
        return
    app.console.print(f"quorum {report['quorum']}, metrics agree within {report['epsilon']:g}, "
                      f"flagged above {report['flag_rate']:.0%} disagreement")
    for v in report["validators"]:
        rate = "-" if v["disagreement_rate"] is None else f"{v['disagreement_rate']:.0%}"
        secs = "-" if v["median_eval_seconds"] is None else f"{v['median_eval_seconds']:.2f}s"
        app.say(f"{v['name']:10} votes {v['votes']:3}  settled {v['settled']:3}  "
                f"disagreed {v['disagreed']:3} ({rate})  eval {secs}", ("  FLAGGED" if v["flagged"] else "", "red"))
    for item in report["ignored"]:
        app.say(("ignored", "yellow"), f" {item['ref']} {item['commit'][:12]}: {item['reason']}")
