"""`woolf init`: create a new ledger with version 0 (signed with the creator's key, or --unsigned).

Usage:
    woolf init hub-work --storage /srv/storage --key ~/.ssh/woolf
    woolf init my-ledger --workload transformers --weights ./my-model --key ~/.ssh/woolf
    woolf init my-ledger --unsigned --hidden-benchmark private.txt
    woolf init chat-ledger --workload transformers --weights ./my-chat-model --benchmark held-out-chats.txt

Thin over woolf.ledger.create (Ledger.init with a CreateOptions).
"""

from __future__ import annotations

from pathlib import Path

import click

from woolf.cli.app import App, json_option, key_values, pass_app
from woolf.errors import UsageError


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
@click.option("--signer", help="Your name in ledger/allowed_signers "
                                "(default: the key's comment, else your contributor id).")
@click.option("--add-signer", "extra", multiple=True, metavar="LINE",
              help="Another allowed_signers line, e.g. from `woolf key create` (repeatable).")
@click.option("--unsigned", is_flag=True, help="No signatures: anyone who can push to the hub has authority.")
@click.option("--woolf-source", metavar="SPEC", envvar="WOOLF_SOURCE",
              help="Where the GitHub workflow's ci/install.sh installs GoodWoolf from: git+https://HOST/PATH@COMMIT "
                   "or https://.../NAME.whl#sha256=HEX [env: WOOLF_SOURCE; default: what this woolf was "
                   "installed from, when that is pinned].")
@click.option("--benchmark", "benchmark", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The public benchmark: this text file, committed to the ledger (default: the workload's own, "
                   "for the built-ins held-out Python sources). Gate a chat model on chat text this way.")
@click.option("--hidden-benchmark", "hidden", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Gate on this private file (only its sha256 and size enter the config; validators get "
                   "the file as WOOLF_HIDDEN_BENCHMARK): participants cannot train on the gate.")
@json_option
@pass_app
def init(app: App, path, storage, workload, alpha, weights, name, settings, signing_key, signer, extra,
         unsigned, woolf_source, benchmark, hidden, as_json):
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
    overrides = key_values(settings)
    if hidden is not None:
        from woolf.ledger.benchmark import hidden_settings  # deferred: fast --help

        overrides.update(hidden_settings(hidden))
    options = CreateOptions(storage=storage, workload=workload, alpha=alpha, weights=weights,
                            name=name, overrides=overrides, signing_key=signing_key, signer=signer,
                            extra_signers=list(extra), woolf_source=woolf_source,
                            benchmark=benchmark)
    ledger = Ledger.init(path, options)
    head = ledger.head()
    skipped = _left_out(ledger, weights)
    if as_json:
        app.emit_json({"path": str(ledger.root), "version": 0, "commit": head.commit,
                       "storage": ledger.store.remote_url(), "signed": bool(signing_key),
                       **({"left_out": skipped} if skipped is not None else {})})
        return
    app.console.print(f"created ledger [bold]{ledger.config.name}[/] at {ledger.root}")
    app.console.print(f"  version 0 = {head.commit[:12]}, weights in {ledger.store.remote_url()}")
    app.console.print(f"  {'signed: you are maintainer and validator' if signing_key else 'UNSIGNED'}")
    params = ledger.config.workload.params
    if params.get("checkpoint_dtype") and params.get("checkpoint_dtype") != params.get("dtype"):
        app.console.print(f"  the ledger keeps {params['dtype']} master weights of your {params['checkpoint_dtype']} "
                          f"checkpoint: updates below half a {params['checkpoint_dtype']} ulp survive merging "
                          "(storage: twice the checkpoint's bytes); `woolf export` says what a "
                          f"{params['checkpoint_dtype']} copy keeps")
    if skipped is not None:
        kept = sorted(params.get("files", {}))
        app.console.print(f"  model files kept in ledger/model/ (pinned by sha256, exported): {', '.join(kept)}")
        if skipped:
            more = f" and {len(skipped) - 12} more" if len(skipped) > 12 else ""
            app.err.print(f"[yellow]note:[/] left out of the ledger (not files woolf knows a model needs): "
                          f"{', '.join(skipped[:12])}{more}")
    if ledger.config.benchmark.hidden_sha256:
        app.console.print(f"  the gate is the hidden benchmark {hidden}: give validators that file "
                          "(WOOLF_HIDDEN_BENCHMARK=PATH; on GitHub the secret WOOLF_HIDDEN_BENCHMARK_URL)")
    else:
        what = f"{benchmark}, copied to {ledger.config.benchmark.path}" if benchmark else \
            f"{ledger.config.benchmark.path} (the workload's own)"
        app.console.print(f"  the gate is the public benchmark {what}, which participants can train on: "
                          "`--hidden-benchmark FILE` gates on a private file instead (docs/protocol.md)")
    app.console.print(f"  next: `woolf hub init hub.git --from {ledger.root}`, "
                      "then clone the hub to train and validate")
    if ledger.config.forge.kind == "github" and "WOOLF_SOURCE=''\n" in (ledger.root / "ci" / "install.sh").read_text():
        app.err.print("[yellow]note:[/] ci/install.sh (the GitHub workflow's installer) pins no GoodWoolf source: "
                      "pass --woolf-source git+https://HOST/PATH@COMMIT for a ledger on GitHub (docs/github.md)")


def _left_out(ledger, weights) -> list[str] | None:
    """A transformers ledger: the files of its --weights directory that init did not keep."""
    if ledger.config.workload.name != "transformers" or weights is None:
        return None
    from woolf.workloads.hf.modeldir import left_out  # deferred: the workload

    return left_out(Path(weights), set(ledger.config.workload.params.get("files", {})))


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
