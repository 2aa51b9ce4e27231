"""The validator's commands: validate the PR queue, audit the ledger.

Usage:
    woolf validate --all --json; woolf validate --watch; woolf audit
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from woolf import interrupts
from woolf.cli.app import App, device_option, forge_option, json_option, pass_app, retrain_text
from woolf.errors import IntegrityError, UsageError
from woolf.interrupts import interruptible


def _print_verdict(app: App, v) -> None:
    colour = "green" if v.accepted else "red"
    where = f"-> version {v.version}" if v.accepted else v.state
    att = "-" if v.attenuation is None else f"{v.attenuation:.3f}"
    retrain = retrain_text(v.retrain)
    # a reason can quote PR paths and names: printable text, never markup
    app.say((v.id, colour), f" {where}  staleness {v.staleness}  attenuation {att}  {v.reason}"
            + (f"  [{retrain}]" if retrain else ""))
    if v.timings:  # what this PR cost, stage by stage (Woolf-Timings; docs/protocol.md "What a PR costs")
        stages = "  ".join(f"{k} {x:.1f}" for k, x in v.timings.items())
        app.say(("  seconds: ", "dim"), f"{stages}  (total {sum(v.timings.values()):.1f})")


@click.command()
@click.argument("ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every open PR (the default when no ID is given).")
@click.option("--watch", is_flag=True, help="Keep validating as PRs arrive (Ctrl-C to stop).")
@click.option("--interval", type=float, default=2.0, show_default=True, help="--watch: seconds between polls.")
@click.option("--name", envvar="WOOLF_VALIDATOR",
              help="Validator name in verdicts [env: WOOLF_VALIDATOR; default: your key's name in "
                   "ledger/allowed_signers, else host:pid].")
@click.option("--evaluate-only", "evaluate_out", type=click.Path(dir_okay=False, path_type=Path),
              help="CI, unprivileged: evaluate one PR (ID or number) and write its verdict record here.")
@click.option("--apply", "apply_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CI, privileged: re-check and carry out a verdict record from --evaluate-only.")
@device_option
@forge_option
@json_option
@pass_app
def validate(app: App, ids, all_, watch, interval, name, evaluate_out, apply_file, device, forge, as_json):
    """Validate open PRs: staleness, attenuated merge, benchmark gate, fast-forward main."""
    from woolf.validator import Validator  # deferred: fast --help

    if ids and all_:
        raise click.UsageError("give IDs or --all, not both")
    from woolf.ledger.trust import signer_name  # deferred: fast --help

    ledger = app.ledger()
    validator = Validator(ledger, device=device, name=name or signer_name(ledger), forge_kind=forge)
    try:
        interrupts.release(restore=True)  # Ctrl-C was deferred while torch loaded (cli/main.py)
    except KeyboardInterrupt:
        app.err.print("interrupted before validating anything: nothing was changed")
        raise click.exceptions.Exit(130) from None
    if evaluate_out or apply_file:
        _ci_step(app, validator, ids, evaluate_out, apply_file, as_json)
        return
    done: list = []
    idle = _Idle(app, interval)

    def show(v) -> None:
        done.append(v)
        idle.since = None  # the next quiet pass says "waiting" again
        if not as_json:
            _print_verdict(app, v)

    try:
        with interruptible():  # Ctrl-C or SIGTERM end the run; a cut-short merge is safe
            if watch:
                verdicts = validator.watch(interval=interval, on_verdict=show, on_idle=idle)
            else:
                verdicts = validator.run(ids=list(ids) or None, on_verdict=show)
    except KeyboardInterrupt:
        app.err.print(_interrupted(done, watch, idle=watch and idle.since is not None))
        if as_json:
            app.emit_json([v.to_json() for v in done])
        if watch:  # the way a watch ends: a success
            return
        raise click.exceptions.Exit(130) from None
    if as_json:
        app.emit_json([v.to_json() for v in verdicts])
    elif validator.deferred:  # open, unjudged: their turn comes in a later pass (validator/downloads.py)
        app.console.print(f"{len(validator.deferred)} open PRs deferred (keyless download budget)")
    elif not verdicts:
        app.console.print("no open pull requests")


def _interrupted(done: list, watch: bool, idle: bool = False) -> str:
    """What a Ctrl-C left: the verdicts recorded (each is final), and that the PR in hand was not
    (a watch that was waiting for PRs had none in hand)."""
    merged = [v for v in done if v.accepted]
    said = (f"{len(done)} verdict(s) recorded ({len(merged)} merged, {len(done) - len(merged)} rejected)"
            if done else "no verdict recorded")
    if idle:
        return f"stopped watching: {said}; it was idle, with no PR in hand"
    return (f"{'stopped watching' if watch else 'interrupted'}: {said}; a PR being validated when Ctrl-C came "
            "got no verdict and stays open (nothing of it was merged), for the next `woolf validate`")


class _Idle:
    """--watch with nothing to do: one line at once, then one a minute, so a quiet watch is not a hung one."""

    EVERY = 60.0

    def __init__(self, app: App, interval: float):
        self.app, self.interval, self.since, self.last = app, interval, None, 0.0

    def __call__(self) -> None:
        now = time.time()
        if self.since is None:  # the first quiet pass, or the first after a verdict
            self.since = self.last = now
            self.app.err.print(f"waiting for PRs… (polling every {self.interval:g}s; Ctrl-C to stop)")
        elif now - self.last >= self.EVERY:
            self.last = now
            since = time.strftime("%H:%M:%S", time.localtime(self.since))
            self.app.err.print(f"still waiting: no open PRs since {since}")


def _ci_step(app: App, validator, ids, evaluate_out, apply_file, as_json) -> None:
    from woolf.storage.files import write_bytes_atomic  # deferred: fast --help
    from woolf.validator.ci import apply_record, evaluate_pr  # deferred: fast --help

    if evaluate_out:
        if len(ids) != 1 or apply_file:
            raise UsageError("--evaluate-only takes exactly one PR (ID or number) and no --apply")
        record = evaluate_pr(validator, ids[0])
        write_bytes_atomic(json.dumps(record, indent=2, sort_keys=True).encode(), evaluate_out)
        app.emit_json(record) if as_json else app.console.print(
            f"{record['id']}: {'accept' if record['accepted'] else 'reject'} ({record['reason']})")
        return
    try:
        record = json.loads(apply_file.read_text())
    except json.JSONDecodeError:
        raise UsageError(f"{apply_file} is not JSON") from None
    verdict = apply_record(validator, record)
    if verdict is None:
        app.console.print("the PR already has a verdict; nothing to do")
    elif as_json:
        app.emit_json(verdict.to_json())
    else:
        _print_verdict(app, verdict)


@click.command()
@click.option("--reevaluate", is_flag=True, help="Also re-run the benchmark on every merged version.")
@json_option
@pass_app
def audit(app: App, reevaluate, as_json):
    """Recompute every merge, check every signature and verdict; exit 5 on any problem."""
    from woolf.audit.recompute import audit as do_audit  # deferred: fast --help

    report = do_audit(app.ledger(), reevaluate=reevaluate)
    if as_json:
        app.emit_json(report.to_json())
    else:
        for note in report.notes:
            app.say(("note", "yellow"), f": {note}")
        for p in report.problems:
            where = "ledger" if p["version"] is None else f"version {p['version']}"
            app.say((where, "red"), f": {p['problem']}")
        app.console.print(f"{report.versions_checked} versions checked: "
                          + ("[green]ok[/]" if report.ok else f"[red]{len(report.problems)} problem(s)[/]"))
    if not report.ok:
        raise IntegrityError("audit failed", hint="see the problems listed above")
