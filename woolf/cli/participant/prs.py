"""The pull-request queue as a participant sees it: `woolf pr list/show/close`.

Usage:
    woolf pr list [--state open|merged|rejected|...] [--json]
    woolf pr show ID; woolf pr close ID [--force]
"""

from __future__ import annotations

import json

import click

from woolf.cli.app import App, forge_option, json_option, pass_app, retrain_text
from woolf.cli.participant.contrib import contributor_option


@click.group()
def pr():
    """The pull-request queue."""


@pr.command("list")
@click.option("--state", type=click.Choice(["open", "merged", "rejected", "withdrawn", "expired", "quarantined"]),
              help="Only pull requests in this state.")
@forge_option
@json_option
@pass_app
def pr_list(app: App, state, forge, as_json):
    """Pull requests, in queue order (when the forge received them)."""
    from woolf.forges import forge_for  # deferred: fast --help

    f = forge_for(app.ledger(), forge)
    prs = f.list(state=state)
    for ref, why in getattr(f, "skipped", []):
        app.err.print(f"skipped malformed ref {ref!r}: {why}", markup=False, highlight=False)
    if as_json:
        app.emit_json([p.to_json() for p in prs])
        return
    app.table(["id", "state", "who", "base", "stale", "version", "reason"],
              [[p.id, p.state, p.contributor or "-", str(p.base_version),
                "-" if p.staleness is None else str(p.staleness),
                "-" if p.version is None else str(p.version), " ".join((p.reason or "").split())]
               for p in prs], yielding="reason")


@pr.command("show")
@click.argument("sub_id")
@forge_option
@json_option
@pass_app
def pr_show(app: App, sub_id, forge, as_json):
    """One pull request and its verdict."""
    from woolf.forges import forge_for  # deferred: fast --help

    p = forge_for(app.ledger(), forge).get(sub_id)
    data = {**p.to_json(), "submission": p.submission}
    if as_json:
        app.emit_json(data)
        return
    for key, value in data.items():  # every value may be attacker-written: one line of printable text, no markup
        if key == "retrain" and value is not None:
            value = retrain_text(value) or value  # in words: matched, unverifiable and why, not drawn
        text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
        app.say((f"{key:>15}", "bold"), " " + " ".join(text.split()))


@pr.command("close")
@click.argument("sub_id")
@click.option("--force", is_flag=True,
              help="Close a pull request that someone else opened (recorded as closed by you).")
@contributor_option
@forge_option
@json_option
@pass_app
def pr_close(app: App, sub_id, force, contributor, forge, as_json):
    """Withdraw your pull request (its contributor's only; --force for another's)."""
    from woolf.forges import forge_for  # deferred: fast --help
    from woolf.protocol.contributor import contributor_id  # deferred: fast --help

    ledger = app.ledger()
    who = contributor_id(contributor, ledger.git)
    p = forge_for(ledger, forge).withdraw(sub_id, by=who, force=force)
    if as_json:
        app.emit_json(p.to_json())
        return
    app.say(f"{sub_id} {p.state}: {p.reason or ''}".rstrip(": "))
