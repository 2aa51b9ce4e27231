"""Commands that create and read a ledger: init, log, show, checkout, status, pull.

Usage:
    woolf init hub-work --storage /srv/storage
    woolf init my-ledger --workload transformers --weights ./my-model
    woolf log -n 5 --json; woolf show 3; woolf checkout 3 -o v3.safetensors
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import click

from woolf.cli.app import App, json_option, pass_app
from woolf.errors import UsageError, WoolfError


def _fmt_metrics(m: dict | None) -> str:
    if not m:
        return "-"
    return " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(m.items()))


fetch_option = click.option(
    "--fetch", "do_fetch", is_flag=True,
    help="Fetch main and the pull requests from origin first (otherwise: this clone's last fetch).")


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def _freshness(app: App, ledger, do_fetch: bool) -> None:
    """Fetch when asked; otherwise say, on stderr, how old this clone's view of origin is."""
    if do_fetch:
        ledger.fetch()
        return
    when = ledger.last_fetch()
    if when is not None:
        app.err.print(f"[dim]as of this clone's last fetch from origin, {_ago(time.time() - when)} "
                      "(`--fetch` or `woolf pull` to update)[/]")


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--storage", help="DVC remote URL (directory, s3://...). Default: PATH.storage beside PATH.")
@click.option("--workload", default="charlm", show_default=True,
              help="Built-in name (charlm, transformers, synthetic), or an installed entry point "
                   "(group goodwoolf.workloads).")
@click.option("--alpha", type=float, help="alpha_base, the scale of every merged delta.")
@click.option("--weights", type=click.Path(exists=True, path_type=Path),
              help="Start from this safetensors checkpoint instead of seeded genesis weights; with "
                   "--workload transformers, a local model directory (config.json, model.safetensors, "
                   "tokenizer.json; docs/workloads.md).")
@click.option("--name", help="Ledger name (default: the directory name).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Any config value, e.g. --set policy.min_improvement=-0.05 (repeatable).")
@click.option("--key", "signing_key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              envvar="WOOLF_SIGNING_KEY",
              help="Your SSH private key: you become maintainer and validator [env: WOOLF_SIGNING_KEY].")
@click.option("--signer", help="Your name in ledger/allowed_signers (default: the key's comment, else your contributor id).")
@click.option("--add-signer", "extra", multiple=True, metavar="LINE",
              help="Another allowed_signers line, e.g. from `woolf key create` (repeatable).")
@click.option("--unsigned", is_flag=True, help="No signatures: anyone who can push to the hub has authority.")
@click.option("--woolf-source", metavar="SPEC", envvar="WOOLF_SOURCE",
              help="Where the GitHub workflow's ci/install.sh installs GoodWoolf from: git+https://HOST/PATH@COMMIT "
                   "or https://.../NAME.whl#sha256=HEX [env: WOOLF_SOURCE; default: what this woolf was "
                   "installed from, when that is pinned].")
@click.option("--hidden-benchmark", "hidden", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Gate on this private file (only its sha256 and size enter the config; validators get "
                   "the file as WOOLF_HIDDEN_BENCHMARK): participants cannot train on the gate.")
@json_option
@pass_app
def init(app: App, path, storage, workload, alpha, weights, name, settings, signing_key, signer, extra,
         unsigned, woolf_source, hidden, as_json):
    """Create a new ledger at PATH with version 0, signed with --key."""
    from woolf.ledger.create import CreateOptions  # deferred: fast --help
    from woolf.ledger.ledger import Ledger  # deferred: fast --help

    if unsigned and (signing_key or extra):
        raise UsageError("--unsigned and --key/--add-signer exclude each other")
    if not unsigned and not signing_key:
        raise UsageError("a ledger is signed by its creator's SSH key: pass --key PATH",
                         hint="make one with `woolf key create --out ~/.ssh/woolf`; or --unsigned (no authority)")

    if signing_key is not None:
        _require_private_key(signing_key)
    overrides = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    if hidden is not None:
        from woolf.ledger.benchmark import hidden_settings  # deferred: fast --help

        overrides.update(hidden_settings(hidden))
    options = CreateOptions(storage=storage, workload=workload, alpha=alpha, weights=weights,
                            name=name, overrides=overrides, signing_key=signing_key, signer=signer,
                            extra_signers=list(extra), woolf_source=woolf_source)
    ledger = Ledger.init(path, options)
    head = ledger.head()
    if as_json:
        app.emit_json({"path": str(ledger.root), "version": 0, "commit": head.commit,
                       "storage": ledger.store.remote_url(), "signed": bool(signing_key)})
        return
    app.console.print(f"created ledger [bold]{ledger.config.name}[/] at {ledger.root}")
    app.console.print(f"  version 0 = {head.commit[:12]}, weights in {ledger.store.remote_url()}")
    app.console.print(f"  {'signed: you are maintainer and validator' if signing_key else 'UNSIGNED'}")
    if ledger.config.benchmark.hidden_sha256:
        app.console.print(f"  the gate is the hidden benchmark {hidden}: give validators that file "
                          "(WOOLF_HIDDEN_BENCHMARK=PATH; on GitHub the secret WOOLF_HIDDEN_BENCHMARK_URL)")
    else:
        app.console.print("  the gate is the public benchmark in git, which participants can train on: "
                          "`woolf init --hidden-benchmark FILE` gates on a private file instead (docs/protocol.md)")
    app.console.print(f"  next: `woolf hub init hub.git --from {ledger.root}`, then clone the hub to train and validate")
    if ledger.config.forge.kind == "github" and "WOOLF_SOURCE=''\n" in (ledger.root / "ci" / "install.sh").read_text():
        app.err.print("[yellow]note:[/] ci/install.sh (the GitHub workflow's installer) pins no GoodWoolf source: "
                      "pass --woolf-source git+https://HOST/PATH@COMMIT for a ledger on GitHub (docs/github.md)")


def _require_private_key(path: Path) -> None:
    """--key names the private key: a public one (K.pub) gets its own one-line answer."""
    try:
        head = path.read_bytes()[:200].decode("ascii", errors="replace").strip()
    except OSError:
        return  # the signing step says what it cannot read
    if head.startswith(("ssh-", "ecdsa-", "sk-")) and "PRIVATE KEY" not in head:
        private = path.with_suffix("") if path.suffix == ".pub" else None
        raise UsageError(f"{path} is a public key: --key takes the private key it belongs to",
                         hint=f"--key {private}" if private else "pass the file without .pub")


def _newest_known_main(app: App, ledger) -> None:
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
    _freshness(app, ledger, do_fetch)
    _newest_known_main(app, ledger)
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
                     (v.contributor or "-") + ("" if v.reverts is None else f" (revert of v{v.reverts})"),
                     _fmt_metrics(v.metrics)])
    app.table(["version", "commit", "time", "base", "stale", "atten", "contributor", "metrics"], rows,
              yielding="metrics")
    if verdicts is not None:
        app.console.print()
        app.table(["submission", "state", "who", "base", "version", "reason"],
                  [[pr["id"], pr["state"], pr["contributor"] or "-", str(pr["base_version"]),
                    "-" if pr.get("version") is None else str(pr["version"]), " ".join((pr["reason"] or "").split())]
                   for pr in verdicts], yielding="reason")


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

    data.update(version_recipe(ledger, v))  # issue 34: the PR's recipe and its re-training, when it has them
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


@click.command()
@fetch_option
@json_option
@pass_app
def status(app: App, do_fetch, as_json):
    """Current version, local weights, storage reachability, how far origin is ahead."""
    ledger = app.ledger()
    _freshness(app, ledger, do_fetch)
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
