"""Shared CLI plumbing: the application object, JSON/human output, the ledger opener.

Usage:
    @click.command()
    @pass_app
    def log(app): app.emit(data, human=lambda: ...)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from woolf.errors import UsageError


def printable(text) -> str:
    """``text`` with every character that is not printable (ESC, newline, NUL, ...) as U+FFFD: what
    is shown of attacker-written text (reasons, messages, names) never moves or retitles a terminal."""
    text = str(text)
    return text if text.isprintable() else "".join(ch if ch.isprintable() else "\ufffd" for ch in text)


@dataclass
class App:
    cwd: Path
    # on a pipe, lines are never wrapped at rich's default 80 columns (`woolf submit | cat`)
    console: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=not sys.stdout.isatty()))
    err: Console = field(default_factory=lambda: Console(stderr=True, highlight=False,
                                                         soft_wrap=not sys.stderr.isatty()))

    def ledger(self):
        from woolf.ledger.ledger import Ledger  # deferred: fast --help
        from woolf.protocol import layout  # deferred: fast --help

        led = _open_ledger(Ledger, self.cwd)
        local = led.root / layout.CONFIG
        on_main = led.git.show_bytes(f"{layout.MAIN}:{layout.CONFIG}")
        try:
            edited = on_main is not None and local.read_bytes() != on_main
        except OSError:
            edited = False
        if edited:  # woolf reads the config committed on main, never the workspace copy
            self.err.print("[yellow]warning:[/] ledger/woolf.toml has edits that are not on main and are "
                           "ignored: woolf uses the config on main (a maintainer changes it with "
                           "`woolf config set KEY=VALUE`)")
        return led

    def table(self, headers: list[str], rows: list[list[str]], yielding: str | None = None) -> None:
        """Print rows as aligned columns: whole on a pipe; on a terminal, one line per row.

        On a terminal only the ``yielding`` column (free text, e.g. a reason) is cut
        with an ellipsis to fit the width; when even that does not fit, it moves to
        its own indented line under the row. Cells are text, never markup: they may
        come from refs anyone can push.
        """
        # cells may come from refs anyone can push: no control characters reach the terminal
        rows = [[printable(c) for c in r] for r in rows]
        cut = headers.index(yielding) if yielding in headers else None
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

        def line(cells, keep=None):
            return "  ".join(c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                             if keep is None or i in keep).rstrip()

        if not self.console.is_terminal or cut is None:
            for i, cells in enumerate([headers, *rows]):
                self.console.print(Text(line(cells), style="bold" if i == 0 and self.console.is_terminal else ""),
                                   soft_wrap=True)
            return
        width = self.console.width
        others = [i for i in range(len(headers)) if i != cut]
        room = width - sum(widths[i] for i in others) - 2 * len(others)
        if room >= 16:  # the free-text column fits beside the others, cut to the room left
            widths[cut] = min(widths[cut], room)
            fit = lambda c: c if len(c) <= room else c[:room - 1] + "…"  # noqa: E731
            self.console.print(Text(line(headers), style="bold"), no_wrap=True, overflow="crop")
            for r in rows:
                self.console.print(Text(line([fit(c) if i == cut else c for i, c in enumerate(r)])),
                                   no_wrap=True, overflow="crop")
            return
        self.console.print(Text(line(headers, others) + f"\n    {headers[cut]}", style="bold"),
                           no_wrap=True, overflow="crop")
        for r in rows:
            self.console.print(Text(line(r, others)), no_wrap=True, overflow="crop")
            if r[cut]:
                free = r[cut] if len(r[cut]) <= width - 4 else r[cut][:width - 5] + "…"
                self.console.print(Text("    " + free, style="dim"), no_wrap=True, overflow="crop")

    def say(self, *parts, err: bool = False) -> None:
        """One line of ``parts`` (text, or (text, style)), each through printable() and shown as rich
        Text, never markup: for lines that quote refs anyone can push."""
        line = Text.assemble(*((printable(p[0]), p[1]) if isinstance(p, tuple) else printable(p) for p in parts))
        (self.err if err else self.console).print(line, soft_wrap=True)  # one line: no wrap can start a fake one

    def emit_json(self, data) -> None:
        # indented for a terminal; compact (C encoder, ~10x faster at 10k versions) for pipes
        indent = 2 if sys.stdout.isatty() else None
        click.echo(json.dumps(data, indent=indent, sort_keys=True, default=str))


def _open_ledger(ledger_cls, cwd: Path):
    """Ledger.open, saying what a hub (bare repository) and a repository that merely carries a
    ledger/woolf.toml (GoodWoolf's own source checkout) are, instead of a git error."""
    from woolf.errors import NotALedgerError  # deferred: fast --help
    from woolf.git.repo import clean_env  # deferred: fast --help

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=clean_env())
        return proc.stdout.strip() if proc.returncode == 0 else ""

    try:
        led = ledger_cls.open(cwd)
    except NotALedgerError:
        if Path(cwd).is_dir() and git("rev-parse", "--is-bare-repository") == "true":
            where = Path(git("rev-parse", "--absolute-git-dir") or cwd)
            raise NotALedgerError(f"{where} is a ledger's hub (a bare git repository): woolf reads a clone of it",
                                  hint=f"clone it: `git clone {where} mine && cd mine && woolf log`") from None
        raise
    tip = led.git.rev_parse("refs/heads/main")
    if tip and "Woolf-Version:" not in led.git.message(tip):  # a ledger's main moves only by versions
        roots = git("rev-list", "--max-parents=0", "refs/heads/main").split()
        if not any("Woolf-Version:" in led.git.message(r) for r in roots[:16]):
            raise NotALedgerError(f"{led.root} is not a ledger: it has a ledger/woolf.toml, but no commit of "
                                  "its main is a ledger version (GoodWoolf's own source checkout is like this)",
                                  hint="clone a ledger's hub, or `woolf init PATH` for a new one; `woolf demo` "
                                       "builds one to try")
    return led


pass_app = click.make_pass_decorator(App)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def device_option(f):
    return click.option(
        "--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
        envvar="WOOLF_DEVICE", help="Where to run the model [env: WOOLF_DEVICE].",
    )(f)


def forge_option(f):
    return click.option(
        "--forge", type=click.Choice(["local", "github"]), envvar="WOOLF_FORGE",
        help="Override forge.kind from ledger/woolf.toml [env: WOOLF_FORGE]. The github forge reads its "
             "token from WOOLF_GITHUB_TOKEN, GITHUB_TOKEN or GH_TOKEN, and a fork from WOOLF_FORK_REMOTE "
             "(a git remote name) and WOOLF_FORK_OWNER (docs/github.md).",
    )(f)


fetch_option = click.option(
    "--fetch", "do_fetch", is_flag=True,
    help="Fetch main and the pull requests from origin first (otherwise: this clone's last fetch).")


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def freshness(app: App, ledger, do_fetch: bool) -> None:
    """Fetch when asked; otherwise say, on stderr, how old this clone's view of origin is."""
    if do_fetch:
        ledger.fetch()
        return
    when = ledger.last_fetch()
    if when is not None:
        app.err.print(f"[dim]as of this clone's last fetch from origin, {_ago(time.time() - when)} "
                      "(`--fetch` or `woolf pull` to update)[/]")


def key_values(items, flag: str = "--set") -> dict[str, str]:
    """``KEY=VALUE`` options (``--set``, ``config set``) as a dict; a usage error names the bad one."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _num(x) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "?"


def retrain_text(record) -> str | None:
    """A verdict's re-training record (its Woolf-Retrain trailer) in words: "retrain: matched (distance 0 <=
    tolerance 0.02)", "retrain: unverifiable (private data ...)", "retrain: not drawn (draw 0.53)"; None when
    the validator did not consider re-training. Attacker-influenced text: the caller prints it as plain text."""
    if not isinstance(record, dict) or not isinstance(record.get("retrain"), str):
        return None
    what = record["retrain"][:40]
    if what == "unverifiable":
        detail = str(record.get("why", ""))[:200]
    elif what == "not drawn":
        detail = f"draw {_num(record.get('draw'))}"
    elif "distance" in record:
        sign = "<=" if what == "matched" else ">"
        detail = f"distance {_num(record.get('distance'))} {sign} tolerance {_num(record.get('tolerance'))}"
    else:
        detail = f"{_num(record['seconds'])} s" if "seconds" in record else ""
    return f"retrain: {what}" + (f" ({detail})" if detail else "")
