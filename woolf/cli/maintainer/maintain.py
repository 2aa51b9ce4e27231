"""Commands for keys, signers, config changes and the hub.

Usage:
    woolf key create --out ~/.ssh/woolf-alice --name alice [--configure]
    woolf hub init hub.git --from my-ledger
    woolf signers list; woolf signers add v2 --key v2.pub --role validator; woolf signers remove v2
    woolf config set policy.min_improvement=-0.05 -m "looser gate"
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from woolf.cli.app import App, json_option, key_values, pass_app
from woolf.errors import UsageError


@click.group()
def key():
    """SSH signing keys (git's gpg.format = ssh)."""


@key.command("create")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the private key (and OUT.pub).")
@click.option("--name", help="Your signer name (default: your contributor id).")
@click.option("--role", "roles", multiple=True, type=click.Choice(["validator", "maintainer"]),
              help="Roles to ask for in the printed line (repeatable).")
@click.option("--configure", is_flag=True, help="Also make this clone sign with it (gpg.format, user.signingkey).")
@json_option
@pass_app
def key_create(app: App, out, name, roles, configure, as_json):
    """Make an ed25519 key and print the ledger/allowed_signers line a maintainer adds."""
    from woolf.git.keys import configure as configure_git  # deferred: fast --help
    from woolf.git.keys import create_key  # deferred: fast --help
    from woolf.git.repo import Git  # deferred: fast --help
    from woolf.protocol.contributor import (  # deferred: fast --help
        OS_USER,
        contributor_source,
        normalize,  # deferred: fast --help
    )
    from woolf.protocol.signers import signer_line  # deferred: fast --help

    # --name, WOOLF_CONTRIBUTOR, git user.name; else the key file's name, never the OS user
    # (`root` is often the maintainer's name too: adding a key under it would replace theirs)
    who, source = contributor_source(name, Git(app.cwd if app.cwd.is_dir() else Path(".")))
    if source == OS_USER:
        who, source = normalize(Path(out).stem or Path(out).name), "the key file's name"
    private, public = create_key(out, who)  # the key's comment is that id: `woolf init --key` signs as it
    line = signer_line(who, public, list(roles))
    if configure:
        configure_git(app.ledger().git, private)
    if as_json:
        app.emit_json({"private": str(private), "public": public, "allowed_signers_line": line})
        return
    app.console.print(f"key {private} (public: {private}.pub), signer name {who!r} ({source}; --name NAME to choose)")
    app.console.print("line for ledger/allowed_signers (a maintainer runs "
                      f"`woolf signers add {who} --key {private}.pub{''.join(' --role ' + r for r in roles)}`):")
    click.echo(line)
    app.err.print(f"note: if {who!r} is already a name in ledger/allowed_signers (`woolf signers list`), "
                  "adding this key replaces that signer's key: make the key again with another --name")


@click.group()
def hub():
    """The bare hub repository and its rule-enforcing hook."""


@hub.command("init")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--from", "source", help="The ledger to serve (a path or git URL).")
@click.option("--hook-only", is_flag=True, help="Only (re)install the hook in the existing hub at PATH.")
@click.option("--max-push-mb", type=click.IntRange(min=1), default=None,
              help="Largest pack one push may send (git receive.maxInputSize)  [default: 16; kept by --hook-only]")
@json_option
@pass_app
def hub_init(app: App, path, source, hook_only, max_push_mb, as_json):
    """Create a bare hub at PATH from a ledger, with hooks that enforce who may move which ref."""
    from woolf.hub.create import init_hub, install_hook  # deferred: fast --help

    if not hook_only and not source:
        raise UsageError("--from LEDGER is required to create a hub", hint="or --hook-only for an existing hub")
    max_push = max_push_mb << 20 if max_push_mb else None
    if hook_only:
        info = {"path": str(path.resolve()), "hook": str(install_hook(path, max_push))}
    else:
        info = init_hub(path, source, max_push)
    _compile_for_hooks()
    if as_json:
        app.emit_json(info)
        return
    app.console.print(f"hub {info['path']} with its pre-receive hook"
                      + ("" if hook_only else f" ({'signed' if info['signed'] else 'UNSIGNED'} ledger)"))
    app.console.print(f"  next: git -C {source} remote add origin {info['path']}; participants clone it")


def _compile_for_hooks() -> None:
    """Byte-compile woolf's modules where they are missing or stale (best effort): every push starts
    the hooks' Python, and without bytecode (a source checkout under PYTHONDONTWRITEBYTECODE, say)
    each start compiles woolf's protocol modules again (measured: the hook's import 100 -> 55 ms)."""
    import compileall  # deferred: fast --help

    import woolf  # deferred: fast --help

    try:
        compileall.compile_dir(str(Path(woolf.__file__).parent), quiet=2)
    except OSError:  # a read-only install: the hooks still run, compiling as they import
        pass


@click.group()
def signers():
    """Who may sign what: ledger/allowed_signers on main."""


@signers.command("list")
@json_option
@pass_app
def signers_list(app: App, as_json):
    """The keys on main and their roles."""
    from woolf.protocol.signers import Signers, signers_text  # deferred: fast --help

    ledger = app.ledger()
    text = signers_text(ledger.git, ledger.git.rev_parse(ledger.main_ref))
    entries = Signers.parse(text.decode()).entries if text else []
    data = [{"name": s.name, "roles": sorted(s.roles), "key": f"{s.keytype} {s.key}"} for s in entries]
    if as_json:
        app.emit_json({"signed": text is not None, "signers": data})
    elif text is None:
        app.console.print("unsigned ledger: no ledger/allowed_signers on main")
    else:
        for d in data:
            app.console.print(f"{d['name']:<20} {','.join(d['roles']):<32} {d['key'][:40]}...")


@signers.command("add")
@click.argument("name")
@click.option("--key", "pub", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="The signer's public key file (.pub).")
@click.option("--role", "roles", multiple=True, type=click.Choice(["validator", "maintainer"]),
              help="Roles beyond contributor (repeatable).")
@click.option("-m", "--message", default="", help="Why (recorded in the change version).")
@json_option
@pass_app
def signers_add(app: App, name, pub, roles, message, as_json):
    """Add or replace NAME's key: a maintainer-signed change version on main."""
    from woolf.ledger.change import set_signer  # deferred: fast --help

    _changed(app, set_signer(app.ledger(), name, pub.read_text(), list(roles), reason=message), as_json)


@signers.command("remove")
@click.argument("name")
@click.option("-m", "--message", default="", help="Why (recorded in the change version).")
@json_option
@pass_app
def signers_remove(app: App, name, message, as_json):
    """Remove NAME's key: a maintainer-signed change version on main."""
    from woolf.ledger.change import set_signer  # deferred: fast --help

    _changed(app, set_signer(app.ledger(), name, None, reason=message), as_json)


def _changed(app: App, v, as_json: bool) -> None:
    """The change version a maintainer command made: one line, or its JSON."""
    if as_json:
        app.emit_json(v.to_json())
    else:
        app.say(f"version {v.version}: {v.subject}")


@click.group()
def config():
    """The ledger's configuration on main."""


@config.command("set")
@click.argument("settings", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("-m", "--message", default="", help="Why (recorded in the change version).")
@json_option
@pass_app
def config_set(app: App, settings, message, as_json):
    """Change config values: a maintainer-signed change version on main (same weights)."""
    from woolf.ledger.change import set_config  # deferred: fast --help

    overrides = key_values(settings, "config set")
    _changed(app, set_config(app.ledger(), overrides, reason=message), as_json)


@config.command("show")
@json_option
@pass_app
def config_show(app: App, as_json):
    """The whole configuration on main (what every validator applies), as TOML."""
    import dataclasses  # deferred: fast --help

    from woolf.protocol.config_text import render_config  # deferred: fast --help

    cfg = app.ledger().config
    if as_json:
        app.emit_json(dataclasses.asdict(cfg))
    else:
        click.echo(render_config(cfg).rstrip())


@config.command("get")
@click.argument("key", metavar="KEY")
@json_option
@pass_app
def config_get(app: App, key, as_json):
    """One value of the configuration on main, e.g. `woolf config get policy.min_improvement`."""
    import dataclasses  # deferred: fast --help

    value = app.ledger().config
    for part in key.split("."):
        if dataclasses.is_dataclass(value) and part in {f.name for f in dataclasses.fields(value)}:
            value = getattr(value, part)
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise UsageError(f"no config key {key!r}", hint="`woolf config show` lists every key")
    value = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    if as_json:
        app.emit_json(value)
    else:
        click.echo(value if not isinstance(value, (dict, list, bool)) else json.dumps(value))
