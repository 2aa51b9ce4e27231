"""A participant's contribution: `woolf train`, then `woolf submit`.

Usage:
    woolf train --steps 60; woolf submit -m "my shard"
    woolf train --lora r=16 --nproc 2; woolf submit
"""

from __future__ import annotations

from pathlib import Path

import click

from woolf import interrupts
from woolf.cli.app import App, device_option, forge_option, json_option, pass_app
from woolf.cli.participant.progress import TrainProgress, step_rate  # noqa: F401 (step_rate: its old home)
from woolf.errors import UsageError

contributor_option = click.option(
    "--contributor", envvar="WOOLF_CONTRIBUTOR",
    help="Your contributor id [env: WOOLF_CONTRIBUTOR; default: git user.name].")


class StepsType(click.ParamType):
    name = "STEPS|auto"

    def convert(self, value, param, ctx):
        if value == "auto":
            return value
        try:
            n = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a number of steps nor 'auto'", param, ctx)
        if n <= 0:
            self.fail(f"{n} is not a positive number of steps", param, ctx)
        return n


@click.command()
@click.option("--steps", type=StepsType(),
              help="Training steps, or 'auto': sized from your measured speed so a contribution takes "
                   "about workload.auto_seconds (default: the ledger's workload.steps).")
@click.option("--fresh", is_flag=True,
              help="Discard your optimizer state and compression residual (.woolf/state) and start over; "
                   "they are otherwise kept across contributions.")
@click.option("--data", type=click.Path(exists=True), help="Train on your own text files instead of your shard.")
@device_option
@click.option("--seed", type=int, default=0, show_default=True,
              help="Random seed of this training run (batch order, dropout).")
@click.option("--offline", is_flag=True, help="Do not pull first; train from the local main.")
@click.option("--take", metavar="TASK", help="Train the shard of an expired, cancelled or failed task (woolf tasks).")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Train on N processes of this machine under torchrun (DDP; FSDP2 when the model does "
                   "not fit one device): one per GPU, or N CPU processes (gloo). Each takes 1/N of every "
                   "global batch, so the result is one process's (docs/workloads.md, several GPUs).")
@click.option("--lora", metavar="SPEC", envvar="WOOLF_LORA",
              help="R or r=R[,alpha=A][,targets=NAME+NAME][,dropout=P][,dtype=auto|bf16|fp32][,ckpt=0]"
                   "[,lr_scale=X|auto][,carry=0|1]: train LoRA "
                   "adapters over the frozen version (transformers workload) and submit the factors; 'off' turns "
                   "the ledger's workload.params.lora off [env: WOOLF_LORA].")
@contributor_option
@json_option
@pass_app
def train(app: App, steps, fresh, data, device, seed, offline, take, nproc, lora, contributor, as_json):
    """Pull the newest version and train from it; keeps the result in .woolf/work."""
    from woolf.participant import TrainOptions  # deferred: fast --help
    from woolf.participant import train as do_train  # deferred: fast --help
    from woolf.participant.distributed import launch, rank_of  # deferred: fast --help

    if lora is not None and lora.strip().isdigit():  # a bare rank, as `woolf demo --lora 16` takes it
        lora = f"r={lora.strip()}"
    ledger = app.ledger()
    if nproc > 1 and _lora_asked(ledger, lora):  # refused here, before torchrun starts N processes
        raise UsageError("--lora trains on one process", hint="run `woolf train --lora ...` without --nproc")
    if nproc > 1:  # N copies of this command under torchrun; rank 0 prints what one process would
        argv = ["-C", str(ledger.root), "train", "--device", device, "--seed", str(seed)]
        for flag, value in (("--steps", steps), ("--data", data), ("--take", take), ("--contributor", contributor),
                            ("--lora", lora)):  # --lora: refused on several processes, in one line
            argv += [flag, str(value)] if value is not None else []
        argv += [flag for flag, on in (("--fresh", fresh), ("--offline", offline), ("--json", as_json)) if on]
        launch(argv, nproc, device)
        return
    if rank_of() > 0:  # another rank of a torchrun group: it trains its share and prints nothing
        do_train(ledger, TrainOptions(steps=steps, data=data, device=device, seed=seed, offline=offline,
                                      contributor=contributor, fresh=fresh, take=take, lora=lora))
        return
    _say_contributor_fallback(app, ledger, contributor)
    total = steps if isinstance(steps, int) else ledger.config.workload.steps
    with TrainProgress(app.err, total, quiet=as_json) as progress:
        options = TrainOptions(steps=steps, data=data, device=device, seed=seed, offline=offline,
                               contributor=contributor, progress=progress, fresh=fresh, take=take, lora=lora)
        # a step of a real model takes a minute on a CPU: the first Ctrl-C is answered at once
        interrupts.announce(lambda: app.err.print("stopping after this step (Ctrl-C again to abort)"))
        done = False
        try:
            result = do_train(ledger, options)
            done = True
            interrupts.announce(None)
            interrupts.release(restore=True)
        except KeyboardInterrupt:
            interrupts.announce(None)
            progress.stop()
            app.err.print("interrupted after training finished: the result is kept; `woolf submit` opens a PR"
                          if done else
                          f"interrupted at step {progress.step}: nothing from this run was saved or submitted"
                          + _earlier_result(ledger))
            raise click.exceptions.Exit(130) from None
    how = result["training"].get("optimizer") or ""
    if how.startswith("fresh (carried state did not load"):  # workloads/optstate.py: never silently, JSON too
        app.err.print(f"[yellow]warning:[/] your optimizer started {how}")
    if as_json:
        app.emit_json(result)
        return
    m = result["metrics"]
    app.console.print(f"trained {result['training']['steps']} steps from version {result['base_version']} "
                      f"in {result['training']['seconds']:.1f}s; benchmark loss "
                      f"{m['before']['loss']:.4f} -> {m['after']['loss']:.4f}")
    if result.get("skipped"):
        names = result["skipped"]
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        app.say(f"note: --data left out {len(names)} path(s) that are hidden or not UTF-8 text: "
                f"{', '.join(names[:6])}{more}", err=True)
    _say_unverifiable(app, result)
    gate = result.get("gate") or {}
    if "merged" in m:
        app.console.print(f"merged as a validator would at staleness 0 ({_share(gate)}): benchmark loss "
                          f"{m['merged']['loss']:.4f}")
    if gate.get("passes") is False:
        app.say(("warning:", "yellow"), f" the benchmark gate would reject this result as a validator merges it "
                f"({_share(gate)}): {gate.get('reason')} "
                f"(policy.min_improvement {ledger.config.policy.min_improvement:+.4f}; negative is the regression "
                "it tolerates)", err=True)
        app.console.print("next: `woolf train` again (more --steps, another --seed or --data), "
                          "or `woolf submit` to let the validators judge it anyway")
        return
    if result.get("lora"):
        lo = result["training"].get("lora", {})
        app.console.print(f"LoRA {result['lora']}: {lo.get('targets')} target tensors, {lo.get('bytes')} bytes "
                          f"to send ({lo.get('bytes', 0) / max(lo.get('dense_bytes', 1), 1):.2%} of a dense delta)")
    app.console.print("next: `woolf submit`")


def _say_disk(app: App, ledger, freed: int) -> None:
    """What submit removed from this clone, and what `woolf gc --local` could (a clone grew by about three
    models per PR)."""
    from woolf.participant.cleanup import reclaimable  # deferred: fast --help

    more = reclaimable(ledger)
    if freed:
        app.err.print(f"removed {freed / 2**20:,.1f} MiB from this clone: the cached copies of what was uploaded")
    if more >= 1 << 20:
        app.err.print(f"this clone's DVC cache keeps {more / 2**20:,.1f} MiB of older versions and deltas: "
                      "`woolf gc --local` removes those that storage holds")


def _lora_asked(ledger, lora: str | None) -> bool:
    """Whether this run would train LoRA adapters: --lora (or WOOLF_LORA), else the ledger's default."""
    text = lora if lora is not None else ledger.config.workload.params.get("lora", "")
    return isinstance(text, str) and text.strip().lower() not in ("", "off", "none")


def _say_unverifiable(app: App, result: dict) -> None:
    """The ledger re-trains PRs and this one cannot be (participant/verifiable.py): say so before it is sent."""
    note = result.get("unverifiable")
    if note:
        refused = "will refuse it" in note
        app.say(("warning:" if refused else "note:", "yellow"), f" {note}", err=True)


def _share(gate: dict) -> str:
    """The share of the delta the gate prediction judged: alpha_base * f(0), and the rule's caveat."""
    scale = gate.get("scale", 1.0)
    text = "the whole delta" if scale == 1.0 else f"alpha_base x f(0) = {scale:g} of the delta"
    rule = gate.get("rule", "attenuated")
    return text if rule == "attenuated" else f"{text}; merge.rule {rule} adds its momentum, which this leaves out"


def _say_contributor_fallback(app: App, ledger, contributor) -> None:
    """Once per clone: the contributor id fell back to the OS user, and how to set one."""
    from woolf.protocol import layout  # deferred: fast --help
    from woolf.protocol.contributor import OS_USER, contributor_source  # deferred: fast --help

    who, source = contributor_source(contributor, ledger.git)
    said = ledger.root / layout.WORK / "contributor-fallback-said"
    if source != OS_USER or said.exists():
        return
    app.err.print(f"note: you contribute as {who!r}, your OS user name: none of --contributor, "
                  "WOOLF_CONTRIBUTOR or git's user.name is set; set one with `git config user.name NAME` "
                  "(said once in this clone)")
    said.parent.mkdir(parents=True, exist_ok=True)
    said.write_text(who + "\n")


def _earlier_result(ledger) -> str:
    """What an interrupted `train` leaves: an earlier result still waiting in the work area, if any."""
    from woolf.participant.state import waiting_result  # deferred: fast --help

    earlier = waiting_result(ledger)
    if earlier is None:
        return ""
    if earlier["submitted"]:
        return f"; the earlier result in .woolf/work was submitted already (PR {earlier['submitted']})"
    return (f"; an earlier result (trained from version {earlier['base_version']}) is still waiting in "
            "the work area: `woolf submit` would send that one")


@click.command()
@click.option("--weights", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Submit these weights (trained by any means) instead of `woolf train`'s.")
@click.option("--base", "base_version", type=int,
              help="With --weights: the version they were trained from (default: local main).")
@click.option("-m", "--message", default="", help="A note for the PR.")
@click.option("--delta-url-base", envvar="WOOLF_DELTA_URL_BASE",
              help="Public https URL of your own DVC storage, for fork PRs [env: WOOLF_DELTA_URL_BASE].")
@click.option("--delta-remote", envvar="WOOLF_DELTA_REMOTE",
              help="Upload the delta to this DVC remote of yours, not the ledger's [env: WOOLF_DELTA_REMOTE].")
@click.option("--error-feedback/--no-error-feedback", default=None,
              help="Add what the ledger did not merge of your earlier PRs (rejected, or attenuated) to "
                   "this delta [default: the ledger's workload.error_feedback].")
@click.option("--compress", metavar="SPEC",
              help="dense, or topk:FRACTION[,bits:2|4|8][,chunk:N]: send the largest FRACTION of each chunk's "
                   "values, quantized; what is dropped is kept in .woolf/state and added to your next delta "
                   "[default: the ledger's delta.compress].")
@contributor_option
@forge_option
@json_option
@pass_app
def submit(app: App, weights, base_version, message, delta_url_base, delta_remote, error_feedback, compress,
           contributor, forge, as_json):
    """Open a pull request carrying trained - base."""
    from woolf.participant import SubmitOptions  # deferred: fast --help
    from woolf.participant import submit as do_submit  # deferred: fast --help

    if base_version is not None and weights is None:  # it was ignored: the trained result names its own base
        raise UsageError("--base goes with --weights: `woolf train`'s result already records the version it "
                         "was trained from", hint="drop --base, or pass the weights with --weights FILE")

    options = SubmitOptions(weights=weights, message=message, contributor=contributor,
                            base_version=base_version, forge=forge, delta_url_base=delta_url_base,
                            delta_remote=delta_remote, error_feedback=error_feedback,
                            compress=compress)
    ledger = app.ledger()
    try:
        with interrupts.interruptible():
            result = do_submit(ledger, options)
    except KeyboardInterrupt:
        app.err.print("interrupted: the PR ref is pushed last, so unless that push had finished no PR was opened "
                      "(`woolf pr list` shows); your trained result is still in .woolf/work for `woolf submit`, "
                      "and a delta already uploaded stays in storage unreferenced")
        raise click.exceptions.Exit(130) from None
    if as_json:
        app.emit_json(result)
        return
    app.console.print(f"opened PR [bold]{result['id']}[/] from version {result['base_version']} "
                      f"({result['delta_kind']} delta {result['delta_size']} bytes, "
                      f"sha256 {result['delta_sha256'][:12]})")
    if result["error_feedback"]:  # what was carried, or a residual set aside
        app.err.print(f"note: {result['error_feedback']}")
    _say_unverifiable(app, result)
    _say_disk(app, ledger, result.get("freed", 0))
