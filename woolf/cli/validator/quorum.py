"""Validators judged by agreement, and training tasks: `woolf validators`, `woolf tasks`.

Usage:
    woolf validators [--json]      # votes, agreement with settled outcomes, median evaluation time
    woolf tasks [--json] [--all]   # training tasks: shard, lease, state (live ones unless --all)
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


@click.command()
@click.option("--all", "all_", is_flag=True, help="Also tasks that ended (settled, cancelled, failed, expired).")
@json_option
@pass_app
def tasks(app: App, all_, as_json):
    """Training tasks: who trains which shard from which version, and each lease's state."""
    from woolf.ledger.tasks import list_tasks  # deferred: fast --help

    views, bad = list_tasks(app.ledger())
    if not all_:
        views = [v for v in views if v["state"] in ("reserved", "started", "submitted", "voting", "expired")]
    if as_json:
        app.emit_json({"tasks": views, "ignored": [{"ref": r, "reason": w} for r, w in bad]})
        return
    for v in views:
        detail = f"  ({v['detail']})" if v["detail"] else ""  # a task's reason: pushed text
        pr = f"  PR {v['submission']}" if v["submission"] else ""
        app.say(f"{v['id']}  {v['state']:9} {v['shard']} v{v['base_version']} x{v['steps']}{pr}{detail}")
    for ref, why in bad:
        app.say(("ignored", "yellow"), f" {ref}: {why}", err=True)
    if not views:
        app.console.print("no tasks" + ("" if all_ else " in progress (--all for every task)"))
