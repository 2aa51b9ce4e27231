"""The live view of a running network: current version, queue, verdicts, benchmark loss.

Usage:
    snap = snapshot(observer_ledger)          # fetches the hub, reads versions and PRs
    console.print(render(snap, elapsed=12.0, genesis_loss=5.7))
    with LiveView(console) as view:           # a live table on a terminal; plain lines on a pipe
        view.show(snap, elapsed, genesis_loss, "woolf demo")
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from woolf.forges.local import LocalForge
from woolf.report.story import activity


@dataclass
class Snapshot:
    versions: list  # newest first
    prs: list  # oldest first

    @property
    def loss(self) -> float | None:
        for v in self.versions:
            if v.metrics and "loss" in v.metrics:
                return v.metrics["loss"]
        return None


def snapshot(ledger) -> Snapshot:
    ledger.fetch()
    ledger.main_ref = "refs/remotes/origin/main"
    return Snapshot(ledger.log(), LocalForge.for_ledger(ledger).list(local_only=True))


def render(snap: Snapshot, elapsed: float, genesis_loss: float | None, title: str = "") -> Group:
    head = snap.versions[0] if snap.versions else None
    count = {s: sum(p.state == s for p in snap.prs) for s in ("open", "merged", "rejected")}
    loss = snap.loss if snap.loss is not None else genesis_loss
    line = Text.assemble(
        (f"{title}  " if title else "", "bold"),
        ("version ", ""), (f"{head.version if head else 0}", "bold cyan"),
        ("   benchmark loss ", ""), (f"{loss:.4f}" if loss is not None else "-", "bold green"),
        (f" (genesis {genesis_loss:.4f})" if genesis_loss is not None else "", "dim"),
        (f"   queue {count['open']}   merged {count['merged']}   rejected {count['rejected']}", ""),
        (f"   {elapsed:5.1f}s", "dim"),
    )
    table = Table("submitted", "who", "state", "base", "stale", "atten", "loss before -> after",
                  expand=False, show_lines=False)
    for p in sorted(snap.prs, key=lambda p: p.id)[-10:]:
        before = (p.metrics_before or {}).get("loss")
        after = (p.metrics_after or {}).get("loss")
        losses = f"{before:.3f} -> {after:.3f}" if before is not None and after is not None else ""
        style = {"merged": "green", "rejected": "red", "open": "yellow"}.get(p.state, "")
        stamp = p.id.split("-")[0]
        table.add_row(f"{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}", p.contributor or "?",
                      Text(p.state, style=style), str(p.base_version),
                      "" if p.staleness is None else str(p.staleness),
                      "" if p.attenuation is None else f"{p.attenuation:.2f}", losses)

    people = Text.assemble(("participants  ", "bold"), *(
        part for who, a in activity(snap.prs).items()
        for part in ((f"{who} ", ""), (f"{a['merged']}", "green"), ("/", "dim"), (f"{a['rejected']}", "red"),
                     ("/", "dim"), (f"{a['open']}", "yellow"), ("   ", ""))))
    legend = Text("merged/rejected/open per participant; stale = versions merged since the PR's base, "
                  "atten = the weight its delta got (1/(1+stale)); loss = benchmark loss before -> after, "
                  "lower is better", style="dim")
    return Group(line, people, table, legend)


class LiveView:
    """The network's progress: rich's Live table on a terminal; on a pipe (where Live prints nothing
    until the end), one plain line each time the version, queue or verdict counts change."""

    def __init__(self, console: Console):
        self.console, self.live, self.last = console, None, None

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=2, transient=False).__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def show(self, snap: Snapshot, elapsed: float, genesis_loss: float | None, title: str = "") -> None:
        if self.live is not None:
            self.live.update(render(snap, elapsed, genesis_loss, title))
            return
        head = snap.versions[0].version if snap.versions else 0
        count = tuple(sum(p.state == s for p in snap.prs) for s in ("open", "merged", "rejected"))
        if (head, count, title) == self.last:
            return
        self.last = (head, count, title)
        loss = snap.loss if snap.loss is not None else genesis_loss
        self.console.print(f"{elapsed:6.1f}s {title}: version {head}, benchmark loss "
                           f"{'-' if loss is None else f'{loss:.4f}'}, queue {count[0]}, merged {count[1]}, "
                           f"rejected {count[2]}", soft_wrap=True, highlight=False)
