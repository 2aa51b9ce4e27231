"""The ledger's history as a tool: eval, diff, bisect, revert.

Usage:
    woolf eval 0 5 9 --benchmark poems.txt --json
    woolf diff 4 5
    woolf bisect --benchmark poems.txt --good 0 --threshold 0.05      # or --run "python test.py"
    woolf revert 5 -m "v5 broke poetry"
"""

from __future__ import annotations

from pathlib import Path

import click

from woolf.cli.app import App, device_option, forge_option, json_option, pass_app
from woolf.errors import UsageError

benchmark_option = click.option(
    "--benchmark", type=click.Path(path_type=Path),
    help="Evaluate on this text file instead of the ledger's benchmark.")


def _fmt(value) -> str:
    return "-" if value is None else (f"{value:.4f}" if isinstance(value, float) else str(value))


def _who(entry: dict) -> str:
    if entry["kind"] != "merge":
        return f"{entry['kind']}: {entry['subject']}"
    rev = "" if entry.get("reverts") is None else f", revert of v{entry['reverts']}"
    return f"{entry['contributor']} (PR {entry['submission']}{rev})"


@click.command("eval")
@click.argument("versions", type=int, nargs=-1, required=True)
@benchmark_option
@device_option
@json_option
@pass_app
def eval_cmd(app: App, versions, benchmark, device, as_json):
    """Evaluate VERSION... with the ledger's workload (cached per version and data)."""
    from woolf.history import Evaluator  # deferred: fast --help
    from woolf.workloads.base import resolve_device  # deferred: fast --help

    ledger = app.ledger()
    records = [ledger.show(n) for n in versions]  # every version exists before anything is evaluated
    ev = Evaluator(ledger, benchmark, resolve_device(device))
    rows = [{"version": v.version, "commit": v.commit, "metrics": ev.metrics(v), "recorded": v.metrics}
            for v in records]
    if as_json:
        app.emit_json({"results": rows, **ev.summary()})
        return
    app.table(["version", "commit", "metrics", "recorded at merge"],
              [[str(r["version"]), r["commit"][:10],
                " ".join(f"{k}={_fmt(v)}" for k, v in sorted(r["metrics"].items())),
                " ".join(f"{k}={_fmt(v)}" for k, v in sorted((r["recorded"] or {}).items())) or "-"]
               for r in rows], yielding="recorded at merge")
    app.say(f"on {ev.source} (sha256 {ev.data_sha256[:12]}): {ev.evaluations} evaluated, "
            f"{ev.cache_hits} from the cache")


@click.command()
@click.argument("a", type=int)
@click.argument("b", type=int)
@benchmark_option
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Tensors to list, largest change first.")
@device_option
@json_option
@pass_app
def diff(app: App, a, b, benchmark, top, device, as_json):
    """Per-tensor change from version A to B, who contributed between them, and the metric change."""
    from woolf.history import Evaluator, diff_versions  # deferred: fast --help
    from woolf.workloads.base import resolve_device  # deferred: fast --help

    ledger = app.ledger()
    ledger.show(a), ledger.show(b)
    if a == b:
        raise UsageError(f"version {a} against itself changes nothing", hint="give two different versions, "
                         f"e.g. `woolf diff {max(a - 1, 0)} {a}`" if a else "e.g. `woolf diff 0 1`")
    ev = Evaluator(ledger, benchmark, resolve_device(device)) if benchmark is not None else None
    d = diff_versions(ledger, a, b, evaluator=ev)
    if as_json:
        app.emit_json(d)
        return
    t = d["total"]
    app.console.print(f"v{a} -> v{b}: |Δ| {t['l2']:.4g} (relative {t['relative']:.3g}), cosine "
                      f"{t['cosine']:.6f}, max |Δ| {t['max_abs']:.3g}")
    ranked = sorted(d["tensors"], key=lambda r: -r.get("l2", float("inf")))
    app.table(["tensor", "shape", "|Δ|", "relative", "cosine", "max |Δ|"],
              [[r["name"], str(r["shape"]), r["change"], "", "", ""] if "change" in r else
               [r["name"], str(r["shape"]), f"{r['l2']:.4g}", f"{r['relative']:.3g}", f"{r['cosine']:.6f}",
                f"{r['max_abs']:.3g}"] for r in ranked[:top]])
    for e in d["between"]:
        app.say(f"  v{e['version']} {_who(e)}")
    m = d["metric"]
    for kind in ("recorded", "evaluated"):
        if kind in m:
            app.console.print(f"{m['name']} {kind}: {_fmt(m[kind]['a'])} -> {_fmt(m[kind]['b'])} "
                              f"(change {_fmt(m[kind]['change'])})")


@click.command()
@benchmark_option
@click.option("--run", "run_cmd", metavar="CMD",
              help="Your own test instead of a benchmark: run with WOOLF_WEIGHTS set to a version's weights; "
                   "exit 0 = good, 1..127 = bad (as `git bisect run`).")
@click.option("--good", type=int, help="A version known good [default: 0].")
@click.option("--bad", type=int, help="A version known bad [default: the newest].")
@click.option("--threshold", type=float, default=0.02, show_default=True,
              help="Bad = worse than the good version by more than this (policy.metric, policy.direction).")
@device_option
@json_option
@pass_app
def bisect(app: App, benchmark, run_cmd, good, bad, threshold, device, as_json):
    """Find the first version that got worse than --good, in about log2(n) evaluations."""
    from woolf.history import bisect as do_bisect  # deferred: fast --help
    from woolf.workloads.base import resolve_device  # deferred: fast --help

    def progress(n, value, verdict):
        if not as_json:
            app.err.print(f"  v{n}: {_fmt(value) if value is not None else ''} {'bad' if verdict else 'good'}")

    r = do_bisect(app.ledger(), benchmark=benchmark, good=good, bad=bad, threshold=threshold, run=run_cmd,
                  device=resolve_device(device), progress=progress)
    cost = f"{r['queries']} versions checked"
    if "cache_hits" in r:
        cost += f" ({r['evaluations']} evaluated, {r['cache_hits']} from the cache)"
    if as_json:
        app.emit_json(r)
    elif r["found"] is None:
        app.console.print(f"no version in v{r['good'] + 1}..v{r['bad']} is bad; {cost}")
    else:
        f = r["found"]
        app.say(f"first bad version: v{f['version']} ({f['commit'][:12]}) {_who(f)}")
        if r.get("reference") is not None:
            last_good = "" if f["version"] - 1 == r["good"] else f"v{f['version'] - 1} {_fmt(f['previous'])}, "
            app.console.print(f"  {r['metric']}: v{r['good']} (good) {_fmt(r['reference'])}, {last_good}"
                              f"v{f['version']} {_fmt(f['value'])}")
        app.console.print(f"  {cost}; `woolf revert {f['version']}` to take it back")
    if r["found"] is None:
        click.get_current_context().exit(1)


@click.command()
@click.argument("version", type=int)
@click.option("-m", "--message", default="", help="A note for the PR.")
@click.option("--contributor", envvar="WOOLF_CONTRIBUTOR",
              help="Your contributor id [env: WOOLF_CONTRIBUTOR; default: git user.name].")
@forge_option
@json_option
@pass_app
def revert(app: App, version, message, contributor, forge, as_json):
    """Open a PR that takes back what VERSION's merge applied (validated like any PR)."""
    from woolf.history import revert as do_revert  # deferred: fast --help

    r = do_revert(app.ledger(), version, message=message, contributor=contributor, forge=forge)
    if as_json:
        app.emit_json(r)
        return
    app.say(f"opened PR {r['id']} on version {r['base_version']}: reverts v{version} "
            f"({r['reverts']['contributor']}, {r['reverts']['submission']})")
