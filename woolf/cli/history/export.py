"""`woolf export`: a version as a directory others load (Hugging Face, or one safetensors file).

Usage:
    woolf export 3 my-model-v3                        # transformers: from_pretrained("my-model-v3")
    woolf export 3 out --dtype float32 --max-shard-size 2GB --json
"""

from __future__ import annotations

from pathlib import Path

import click

from woolf.cli.app import App, json_option, pass_app
from woolf.cli.history.ledger import newest_known_main


@click.command("export")
@click.argument("version", type=int)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16", "float64"]), default=None,
              help="Write the weights in this dtype (default: the checkpoint's, for transformers, when it keeps "
                   "90% of what the ledger changed since version 0, else float32; otherwise as stored).")
@click.option("--max-shard-size", default="5GB", show_default=True,
              help="Shard the weights above this size (5GB, 500MB, 2GiB or bytes), as save_pretrained does.")
@json_option
@pass_app
def export(app: App, version, directory, dtype, max_shard_size, as_json):
    """Write a version into a new or empty DIRECTORY, its weights checked against their sha256."""
    from woolf.ledger.export import export_version  # deferred: the library

    ledger = app.ledger()
    newest_known_main(app, ledger)  # a validator's clone exports what it merged, as its `woolf log` lists
    result = export_version(ledger, version, directory, dtype=dtype, max_shard_size=max_shard_size)
    if as_json:
        app.emit_json(result)
        return
    files = ", ".join([*result["files"], "woolf-export.json"])
    app.console.print(f"version {version} -> {result['path']} ({result['dtype']}; {files})")
    note = precision_note(result.get("precision"), result["dtype"])
    if note:
        app.err.print(note)


def precision_note(p: dict | None, written: str) -> str | None:
    """What rounding the weights to a narrower dtype keeps of the ledger's changes since version 0."""
    if not p:
        return None
    share = f"{p['share']:.1%} of the {p['changed']:,} elements the ledger changed since version 0"
    if p["chose"] == "masters":
        return (f"note: wrote {written}, the ledger's master weights: {p['dtype']} (the checkpoint's dtype) would "
                f"keep only {share}; the rest are updates below half its ulp (`--dtype {p['dtype']}` writes "
                "it anyway, at a fraction of the size)")
    lost = "" if p["kept"] == p["changed"] else "; `--dtype float32` keeps all"
    return f"note: {p['dtype']} keeps {share}{lost}"
