"""`woolf prove`: serve the states the validators' audits of this clone's open PRs ask for.

Usage:
    woolf prove                 # answer every challenge waiting now, once
    woolf prove --watch         # and keep answering until every PR this clone keeps states for is settled
"""

from __future__ import annotations

import click

from woolf.cli.app import App, json_option, pass_app


@click.command()
@click.option("--watch", is_flag=True, help="keep answering until every PR this clone keeps states for is settled")
@click.option("--interval", type=float, default=5.0, show_default=True, help="seconds between looks with --watch")
@json_option
@pass_app
def prove(app: App, watch, interval, as_json):
    """Answer validators' challenges to your open PRs: upload the training states their audits ask for."""
    from woolf.participant.prove import open_runs  # deferred: fast --help
    from woolf.participant.prove import prove as run_prove  # deferred: fast --help

    ledger = app.ledger()

    def said(entry: dict) -> None:
        if not as_json:
            app.console.print(f"answered {entry['validator']}'s challenge to {entry['pr']}: segments "
                              f"{entry['segments']} ({entry['bytes']} bytes uploaded)")

    done = run_prove(ledger, watch=watch, interval=interval, on_answer=said)
    if as_json:
        app.emit_json({"answered": done, "open": open_runs(ledger)})
    elif not done:
        left = open_runs(ledger)
        app.console.print(f"no challenge to answer; {len(left)} open PR(s) keep their states for an audit"
                          if left else "no open PR keeps states for an audit")
