"""A participant's view of main: `woolf pull` (follow it) and `woolf status` (where this clone stands).

Usage:
    woolf pull [--json]             # git pull --ff-only, then fetch and materialise the weights
    woolf status [--fetch] [--json] # version, local weights, storage reachability, origin's lead
"""

from __future__ import annotations

import click

from woolf.cli.app import App, fetch_option, freshness, json_option, pass_app


@click.command()
@fetch_option
@json_option
@pass_app
def status(app: App, do_fetch, as_json):
    """Current version, local weights, storage reachability, how far origin is ahead."""
    ledger = app.ledger()
    freshness(app, ledger, do_fetch)
    st = ledger.status()
    if as_json:
        app.emit_json(st.to_json())
        return
    app.console.print(f"version {st.version} ({st.commit[:12]})")
    local = {None: "missing (run `woolf pull`)", True: "match", False: "DIFFER from the version"}
    app.console.print(f"local weights: {local[st.weights_match]} ({st.weights_path})")
    reach = "reachable" if st.storage_reachable else f"UNREACHABLE: {st.storage_error}"
    app.console.print(f"storage: {st.storage_url} {reach}")
    if st.behind_origin:
        app.console.print(f"origin/main is {st.behind_origin} version(s) ahead: `woolf pull`")
    elif st.behind_origin == 0:
        app.console.print("up to date with origin/main as last fetched")


@click.command()
@json_option
@pass_app
def pull(app: App, as_json):
    """git pull --ff-only, then fetch and materialise the current weights."""
    head = app.ledger().pull()
    if as_json:
        app.emit_json(head.to_json())
        return
    app.console.print(f"at version {head.version} ({head.commit[:12]}), weights materialised")
