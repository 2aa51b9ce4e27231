"""Commands that run a whole network or describe one: demo, report.

Usage:
    woolf demo --quick; woolf report --out report/
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from woolf.cli.app import App, json_option, key_values, pass_app


@click.command()
@click.option("--participants", type=click.IntRange(min=1), help="Participant processes [default: 3; --quick 2].")
@click.option("--rounds", type=click.IntRange(min=1), help="Contributions per participant [default: 8; --quick 4].")
@click.option("--validators", type=click.IntRange(min=1), help="Validator processes [default: 2; --quick 1].")
@click.option("--steps", type=click.IntRange(min=1), help="Training steps per contribution [default: 30; --quick 15].")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default="woolf-demo",
              show_default=True, help="Where the hub is built (an earlier demo hub there: see --force).")
@click.option("--force", is_flag=True,
              help="Replace an earlier demo hub in --dir (its clones' open PRs are lost); on a terminal "
                   "you are asked instead.")
@click.option("--quick", is_flag=True, help="Smaller run: 2 participants x 4 rounds x 15 steps, 1 validator.")
@click.option("--quorum", type=click.IntRange(min=1), default=1, show_default=True,
              help="Validators whose signed votes must agree before a PR settles (validators.quorum).")
@click.option("--dishonest-validator", "dishonest", is_flag=True,
              help="The last validator votes to accept everything with invented metrics.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Set a key of the demo ledger's config, as `woolf init --set` (e.g. merge.rule=fedbuff).")
@click.option("--regime", type=click.Choice(["continued-domain", "continued-iid", "scratch-domain", "scratch-iid"]),
              default="continued-domain", show_default=True,
              help="continued-*: genesis is a charlm pretrained on the corpus (built once, cached); scratch-*: "
                   "random weights. *-domain: each participant its own part of the corpus; *-iid: a shared pool.")
@click.option("--adversaries", default="", metavar="KIND,...",
              help="Add cheating participants: free-rider, copycat, overfitter, noise, flooder, lazy "
                   "(comma-separated).")
@click.option("--lora", metavar="R", default=None,
              help="Participants contribute LoRA adapters of rank R (peft; or a spec such as r=8,alpha=8), sent "
                   "as factor pairs and merged exactly; the demo ledger accepts the lora kind.")
@json_option
@pass_app
def demo(app: App, participants, rounds, validators, steps, directory, force, quick, quorum, dishonest, settings,
         regime, adversaries, lora, as_json):
    """Run a whole decentralized training network on this machine."""
    from woolf.demo.hub import describe_earlier, earlier_hub  # deferred: fast --help
    from woolf.demo.kinds import parse_kinds  # deferred: fast --help
    from woolf.demo.lora import demo_lora  # deferred: fast --help
    from woolf.protocol.config import LedgerConfig  # deferred: fast --help
    from woolf.protocol.config_text import apply_overrides  # deferred: fast --help

    def pick(value, full, small):
        return value if value is not None else (small if quick else full)

    # small contributions merge far more often than large ones (benchmarks/RESULTS.md §4)
    participants, rounds, validators = pick(participants, 3, 2), pick(rounds, 8, 4), pick(validators, 2, 1)
    overrides = key_values(settings)
    apply_overrides(LedgerConfig(name="woolf-demo"), overrides)  # a bad --set fails now, nothing built
    kinds = parse_kinds(adversaries)  # and a bad --adversaries, before torch loads
    lora = demo_lora(lora)  # and a bad --lora
    root = app.cwd / directory
    if earlier_hub(root) is not None and not force and sys.stdin.isatty() and not as_json:
        force = click.confirm(f"{describe_earlier(root)}. Replace it?", default=False, err=True)
        if not force:
            app.err.print(f"left {root} as it was")
            raise click.exceptions.Exit(1)
    from woolf.demo.run import DemoOptions, run_demo  # deferred: loads torch
    options = DemoOptions(participants=participants, rounds=rounds, validators=validators,
                          steps=steps, quick=quick, console=app.err if as_json else app.console,
                          settings=overrides, quorum=quorum, dishonest=dishonest, regime=regime,
                          adversaries=kinds, replace=force, lora=lora)
    r = run_demo(root, options)
    if as_json:
        app.emit_json(r.to_json())
        if r.interrupted:
            click.get_current_context().exit(130)
        return
    print_summary(app.console, r)
    woolf_cmd = "woolf" if shutil.which("woolf") else f"{sys.executable} -m woolf"
    app.console.print(f"try: git clone {r.dir}/hub.git mine && cd mine && {woolf_cmd} log")
    if r.interrupted:
        click.get_current_context().exit(130)  # like any interrupted command


def print_summary(c, r) -> None:
    """The demo's summary on console ``c``: what merged, the loss, each participant, the quorum, the
    comparison with the reference runs, each contributor's outcome, the times."""
    c.rule("summary" + (" (INTERRUPTED)" if r.interrupted else ""))
    c.print(f"regime: {r.regime_words} (--regime {r.regime})")
    c.print(f"contributions: {r.contributions}")
    c.print(f"versions merged: {r.versions_merged}   PRs rejected: {r.prs_rejected}"
            + (f"   merged by kind: {', '.join(f'{k} {n}' for k, n in r.merged_kinds.items())}"
               if r.lora else ""))
    if r.lora_bytes and r.dense_bytes:
        c.print(f"  a LoRA PR's factor file: {r.lora_bytes:,} bytes = {r.lora_bytes / r.dense_bytes:.1%} of a dense "
                f"float32 delta ({r.dense_bytes:,} bytes)")
    for kind, n in r.rejections.items():
        c.print(f"  rejected x{n}: {kind}")
    c.print(f"benchmark loss (nats/byte, lower is better): genesis {r.genesis_loss:.4f} -> "
            f"final {r.final_loss:.4f}")
    if r.best_version is not None:
        from woolf.report.story import facts_sentence  # deferred: fast --help

        c.print("  " + facts_sentence({"best_version": r.best_version, "best_loss": r.best_loss,
                                       "final_version": r.final_version, "final_loss": r.final_loss,
                                       "merges": r.versions_merged, "regressing_merges": r.regressing_merges}))
    if r.activity:
        c.print("per participant: " + "   ".join(
            f"{who} {a['merged']} merged / {a['rejected']} rejected" for who, a in r.activity.items()))
    if r.quorum > 1 or r.dishonest:
        c.print(f"quorum {r.quorum}: merges resting on fewer than {r.quorum} honest votes: "
                f"{r.merges_without_honest_quorum}; flagged by `woolf validators`: {', '.join(r.flagged) or 'none'}"
                + (f" (dishonest: {r.dishonest})" if r.dishonest else ""))
    for line in comparison_lines(r):
        c.print(line)
    for line in outcome_lines(r):
        c.print(line)
    c.print(f"{wall_line(r)}   hub: {r.dir}")
    if r.report:
        c.print(f"report: {r.report}")


def outcome_lines(r) -> list[str]:
    """What each contributor got (merged / rejected / marked, rating), honest ones first."""
    if not r.outcomes:
        return []
    out = ["contributors (rating = OpenSkill ordinal; `woolf leaderboard` in the hub):"]
    for who, o in sorted(r.outcomes.items(), key=lambda kv: (kv[1]["adversary"], -(kv[1]["rating"] or -1e9))):
        tag = "adversary" if o["adversary"] else "honest"
        rating = "-" if o["rating"] is None else f"{o['rating']:.2f}"
        share = "-" if o.get("credit") is None else f"{o['credit']:.0%}"
        out.append(f"  {who:<12} {tag:<9} merged {o['merged']:>3}  rejected {o['rejected']:>3}  "
                   f"marked {o['marked']:>3}  rating {rating}  credit {share}")
    from woolf.report.board import CREDIT_RULE  # deferred: fast --help
    from woolf.report.story import MARKED_AND_RANDOM, RATING_VS_CREDIT  # deferred: fast --help

    out.append("  " + MARKED_AND_RANDOM)
    out.append(f"  ({CREDIT_RULE})")
    out.append("  " + RATING_VS_CREDIT)
    if r.honest_above_adversaries is not None:
        out.append("every honest participant ranks above every adversary: "
                   + ("yes" if r.honest_above_adversaries else "NO"))
    return out


def wall_line(r) -> str:
    """Where the wall time went: set-up (with the pretrained genesis, when this run built it), the
    network, the reference runs and the report."""
    built = f", of which building the pretrained genesis {r.genesis_build_seconds:.0f}s" \
        if r.genesis_build_seconds is not None else ""
    rest = r.wall_seconds - r.setup_seconds - r.network_seconds - r.reference_seconds
    return (f"wall time: {r.wall_seconds:.1f}s: set-up {r.setup_seconds:.0f}s{built}, the network "
            f"{r.network_seconds:.0f}s, the reference runs {r.reference_seconds:.0f}s, the report {max(rest, 0):.0f}s")


def comparison_lines(r) -> list[str]:
    """The ledger against the reference runs at the same compute, in words."""
    if r.alone_loss is None:
        return []
    per = r.rounds * r.steps
    dense = " (dense)" if r.lora else ""  # the bounds train every parameter
    rows = [("the ledger (asynchronous, merged by validators)", r.final_loss),
            (f"each participant alone{' with LoRA' if r.lora else ''}, {per} steps (best / mean)", None),
            (f"synchronous data parallel{dense}, {r.participants} workers x {per} steps", r.parallel_loss),
            (f"centralized{dense}, one worker, {r.total_steps} steps", r.baseline_loss)]
    out = ["same compute, benchmark loss:"]
    for label, value in rows:
        if value is None and label.startswith("each"):
            out.append(f"  {label:<58} {r.alone_loss:.4f} / {r.alone_loss_mean:.4f}")
        elif value is not None:
            out.append(f"  {label:<58} {value:.4f}")
    from woolf.report.story import joining_sentence  # deferred: fast --help

    return out + [joining_sentence(r.to_json())]


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default="report", show_default=True,
              help="Directory for index.html, summary.md and the PNG plots it shows.")
@json_option
@pass_app
def report(app: App, out, as_json):
    """Write an HTML page, PNG plots and a markdown summary of this ledger."""
    from woolf.report.build import build_report  # deferred: fast --help

    paths = build_report(app.ledger(), app.cwd / out)
    if as_json:
        app.emit_json({k: [str(p) for p in v] if isinstance(v, list) else str(v) for k, v in paths.items()})
        return
    app.console.print(f"report: {paths['html']}\nsummary: {paths['markdown']}")
