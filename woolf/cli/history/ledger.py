"""Commands that read a ledger's versions: log, show, checkout.

Usage:
    woolf log -n 5 --json; woolf show 3; woolf checkout 3 -o v3.safetensors
"""

from __future__ import annotations

import datetime
from pathlib import Path

import click

from woolf.cli.app import App, fetch_option, freshness, json_option, pass_app, printable
from woolf.errors import UsageError, WoolfError


def _fmt_metrics(m: dict | None) -> str:
    if not m:
        return "-"
    return " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(m.items()))


def newest_known_main(app: App, ledger) -> None:
    """Read origin's main when this clone's own main is behind it: a validator's clone merges by pushing
    to origin and leaves its local main where it was; `woolf log` shows what the clone knows."""
    from woolf.protocol import layout  # deferred: fast --help

    origin = "refs/remotes/origin/main"
    local, remote = ledger.git.rev_parse(layout.MAIN), ledger.git.rev_parse(origin)
    if not remote or local == remote or not local or not ledger.git.is_ancestor(local, remote):
        return
    try:
        behind = ledger.head(origin).version - ledger.head().version
    except WoolfError:  # origin's tip is no version: `woolf status` says what is wrong
        return
    ledger.main_ref = origin
    app.err.print(f"[dim]showing origin/main: this clone's main is {behind} version(s) behind it "
                  "(`woolf pull` moves it)[/]")


@click.command()
@click.option("-n", "limit", type=click.IntRange(min=1), help="Show at most N versions (N >= 1).")
@click.option("--all", "show_all", is_flag=True, help="Also show every verdict (merged, rejected, withdrawn).")
@fetch_option
@json_option
@pass_app
def log(app: App, limit, show_all, do_fetch, as_json):
    """Versions, newest first (this clone's view; --fetch to update it first)."""
    ledger = app.ledger()
    if show_all and not do_fetch and not ledger.has_pr_refs() and ledger.has_origin():
        do_fetch = True  # git clone fetches no PR refs: without them --all would show no verdict at all
        app.err.print("[dim]fetching the pull requests from origin first (git clone does not)[/]")
    freshness(app, ledger, do_fetch)
    newest_known_main(app, ledger)
    versions = ledger.log(limit=limit)
    verdicts = None
    if show_all:
        from woolf.forges.local import LocalForge  # deferred: fast --help

        verdicts = [pr.to_json() for pr in LocalForge.for_ledger(ledger).list(local_only=True)
                    if pr.state != "open"]
    if as_json:
        data = [v.to_json() for v in versions]
        app.emit_json({"versions": data, "verdicts": verdicts} if show_all else data)
        return
    rows = []
    for v in versions:
        when = datetime.datetime.fromtimestamp(v.time, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        rows.append([str(v.version), v.commit[:10], when,
                     "-" if v.base_version is None else str(v.base_version),
                     "-" if v.staleness is None else str(v.staleness),
                     "-" if v.attenuation is None else f"{v.attenuation:.3f}",
                     _who_column(v),
                     _fmt_metrics(v.metrics)])
    app.table(["version", "commit", "time", "base", "stale", "atten", "contributor", "metrics"], rows,
              yielding="metrics")
    if verdicts is not None:
        app.console.print()
        app.table(["submission", "state", "who", "base", "version", "reason"],
                  [[pr["id"], pr["state"], pr["contributor"] or "-", str(pr["base_version"]),
                    "-" if pr.get("version") is None else str(pr["version"]), " ".join((pr["reason"] or "").split())]
                   for pr in verdicts], yielding="reason")


def _who_column(v) -> str:
    """The contributor, a revert's target, or what a maintainer's change version changed."""
    if v.change and not v.contributor:
        return f"({printable(v.change)[:20]} change)"
    return (v.contributor or "-") + ("" if v.reverts is None else f" (revert of v{v.reverts})")


@click.command()
@click.argument("version", type=int)
@json_option
@pass_app
def show(app: App, version, as_json):
    """One version in full."""
    ledger = app.ledger()
    v = ledger.show(version)
    ptr = ledger.pointer(v.commit)
    data = {**v.to_json(), "weights_md5": ptr.md5, "weights_size": ptr.size}
    from woolf.ledger.recipes import version_recipe  # deferred: loads yaml

    data.update(version_recipe(ledger, v))  # the PR's recipe and its re-training, when it has them
    if as_json:
        app.emit_json(data)
        return
    for key, value in data.items():
        if value is None or value == {} or value == []:
            continue  # genesis has no base, staleness, contributor...
        if key == "time" and isinstance(value, (int, float)):
            value = datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        elif isinstance(value, dict):
            value = _fmt_metrics(value) if all(isinstance(x, (int, float)) for x in value.values()) else \
                "  ".join(f"{k}={x}" for k, x in sorted(value.items()))
        elif isinstance(value, list):
            value = ", ".join(str(x) for x in value)
        app.say((f"{key:>15}", "bold"), f" {value}")  # messages and names may be anyone's text: no markup


@click.command()
@click.argument("version", type=int)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the weights here (default: .woolf/versions/vN.safetensors).")
@json_option
@pass_app
def checkout(app: App, version, output, as_json):
    """Fetch the weights of any version, checked against their recorded hash."""
    if output is not None and not output.parent.is_dir():
        raise UsageError(f"-o {output}: the directory {output.parent} does not exist",
                         hint=f"create it first (`mkdir -p {output.parent}`), or choose another path")
    ledger = app.ledger()
    out = ledger.checkout(version, output)
    if ledger.last_rebuild:  # storage keeps snapshots only (`woolf gc`)
        r = ledger.last_rebuild
        app.err.print(f"version {version} is not kept in storage: rebuilt from version {r['from']} and "
                      f"{r['deltas']} merged deltas, sha256 checked")
    if as_json:
        ptr = ledger.pointer(ledger.show(version).commit)
        app.emit_json({"version": version, "path": str(out), "size": ptr.size, "md5": ptr.md5,
                       "rebuilt": ledger.last_rebuild})
        return
    app.console.print(f"version {version} -> {out}")
