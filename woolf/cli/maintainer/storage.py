"""Storage that grows by deltas: `woolf storage` (bytes per kind) and `woolf gc` (drop non-snapshot weights).

Usage:
    woolf storage --json
    woolf gc --dry-run; woolf gc
    woolf gc --local            # a clone's own disk: cached objects storage holds, submitted trained weights
"""

from __future__ import annotations

import click

from woolf.cli.app import App, json_option, pass_app


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


@click.command()
@json_option
@pass_app
def storage(app: App, as_json):
    """Bytes in storage by kind: snapshots, deltas, outer states, and what `woolf gc` can reclaim."""
    from woolf.ledger.retention.gc import survey  # deferred: fast --help

    data = survey(app.ledger())
    if as_json:
        app.emit_json(data)
        return
    app.table(["kind", "objects", "bytes"],
              [[kind, str(data[kind]["count"]), _mib(data[kind]["bytes"])]
               for kind in ("snapshots", "deltas", "states", "reclaimable", "removed", "missing", "tampered")])
    app.console.print(f"{data['versions']} versions, a snapshot every {data['snapshot_every']}; "
                      f"stored {_mib(data['stored_bytes'])}, after `woolf gc` {_mib(data['after_gc_bytes'])}")
    if data["missing"]["count"]:
        app.err.print("[yellow]warning:[/] objects that must stay are missing from storage: run `woolf audit`")
    for md5 in data["tampered"]["objects"]:
        app.err.print(f"[yellow]warning:[/] object {md5} in storage is not its bytes (planted or tampered): "
                      "it is never trusted; those versions are rebuilt from a snapshot and the deltas")


@click.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--local", is_flag=True,
              help="This clone only, storage untouched: remove cached objects it no longer needs that storage "
                   "holds (older versions' weights, submitted deltas) and trained weights already submitted.")
@json_option
@pass_app
def gc(app: App, dry_run, local, as_json):
    """Remove the full weights of versions that are neither snapshots nor the newest (rebuilt on demand)."""
    from woolf.ledger.retention.gc import collect  # deferred: fast --help

    if local:
        _gc_local(app, dry_run, as_json)
        return
    data = collect(app.ledger(), dry_run=dry_run)
    if as_json:
        app.emit_json(data)
        return
    verb = "would remove" if dry_run else "removed"
    app.console.print(f"{verb} the weights of {len(data['removed'])} versions ({_mib(data['bytes'])}); "
                      f"snapshots every {data['snapshot_every']} versions and the newest ({data['head']}) stay")


def _gc_local(app: App, dry_run: bool, as_json: bool) -> None:
    from woolf.participant.cleanup import clean_cache  # deferred: fast --help

    data = clean_cache(app.ledger(), dry_run=dry_run)
    if as_json:
        app.emit_json(data)
        return
    verb = "would remove" if dry_run else "removed"
    app.console.print(f"{verb} {len(data['removed'])} object(s) from this clone ({_mib(data['bytes'])}); "
                      "the current version's weights stay, and storage is untouched")
    if data["kept"]:
        app.console.print(f"kept {len(data['kept'])} cached object(s) the ledger's storage does not hold "
                          "(uploaded to a remote of your own, or never uploaded)")
