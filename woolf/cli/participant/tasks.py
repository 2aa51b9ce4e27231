"""Training tasks as a participant sees them: `woolf tasks`.

Usage:
    woolf tasks [--json] [--all]   # who trains which shard from which version; live leases unless --all
"""

from __future__ import annotations

import click

from woolf.cli.app import App, json_option, pass_app


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
