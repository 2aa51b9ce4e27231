"""`woolf report`: a self-contained HTML page, PNG plots and a markdown summary of a ledger.

Usage:
    paths = build_report(Ledger.open("."), Path("report"))     # {"html": ..., "markdown": ..., "plots": [...]}
"""

from __future__ import annotations

import base64
import datetime
import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from woolf.forges.local import LocalForge  # noqa: E402
from woolf.report.scoring import scoring_section  # noqa: E402
from woolf.report.story import (  # noqa: E402
    facts_sentence,
    joining_sentence,
    regime_sentence,
    rejection_kinds,
    version_facts,
)


def _collect(ledger) -> tuple[list, list]:
    if ledger.has_origin():
        ledger.fetch()
        ledger.main_ref = "refs/remotes/origin/main"
    versions = list(reversed(ledger.log()))
    prs = LocalForge.for_ledger(ledger).list(local_only=True)
    return versions, prs


REFERENCE_LINES = (  # the demo's reference runs at the same compute
    ("alone_loss", "best participant alone", "#e76f51", "-"),
    ("alone_loss_mean", "participants alone (mean)", "#f4a261", (0, (1, 2))),
    ("parallel_loss", "synchronous data parallel", "#264653", "-."),
    ("baseline_loss", "centralized, same total steps", "grey", "--"),
)
LABELS = {"participants": "participants", "validators": "validators", "rounds": "rounds per participant",
          "steps": "steps per contribution", "versions_merged": "versions merged",
          "prs_rejected": "PRs rejected", "genesis_loss": "loss at genesis", "final_loss": "loss of the ledger",
          "alone_loss": "best participant alone", "alone_loss_mean": "participants alone (mean)",
          "parallel_loss": "synchronous data parallel", "baseline_loss": "centralized, same total steps",
          "network_seconds": "network time (s)", "reference_seconds": "reference runs (s)",
          "wall_seconds": "wall time (s)", "interrupted": "interrupted",
          "best_version": "best version", "best_loss": "loss of the best version",
          "final_version": "final version", "regressing_merges": "merges that raised the loss",
          "lora": "LoRA adapters of each contribution (woolf demo --lora)"}
CAPTIONS = {
    "loss_per_version": "Benchmark loss of every merged version (lower is better), with the reference "
                        "runs at the same compute as horizontal lines.",
    "contributors": "Pull requests per contributor, by verdict.",
    "ratings": "Each contributor's OpenSkill rating (ordinal, mu - 3 sigma; higher is better) after each window "
               "of verdicts.",
    "staleness": "Staleness of each judged pull request (versions merged since its base) and the "
                 "attenuation its delta got when merged.",
}


def _loss(v, versions) -> float | None:
    if v.metrics and "loss" in v.metrics:
        return v.metrics["loss"]
    if v.version == 0:  # ledgers made before genesis recorded its metrics: version 1's "before"
        first = next((x for x in versions if x.version == 1 and x.metrics_before), None)
        if first and "loss" in first.metrics_before:
            return first.metrics_before["loss"]
    return None


LOSS_UNITS = {"charlm": "nats/byte", "transformers": "nats/token"}  # what each built-in's "loss" is per


def loss_unit(workload: str) -> str:
    """The unit of the benchmark loss of a ledger's workload: "" where woolf does not know it."""
    return LOSS_UNITS.get(workload, "")


def _references_drawn(demo: dict | None) -> bool:
    return bool(demo) and any(demo.get(key) is not None for key, *_ in REFERENCE_LINES)


def _plot_loss(versions, out: Path, demo: dict | None, unit: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    pts = [(v.version, loss) for v in versions if (loss := _loss(v, versions)) is not None]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label="ledger (merged versions)")
    refs = []
    for key, label, colour, style in REFERENCE_LINES:
        if demo and demo.get(key) is not None:
            if key == "alone_loss_mean" and demo.get("alone_loss") == demo[key]:
                continue  # one participant: its mean is its best, one line
            ax.axhline(demo[key], color=colour, ls=style, label=label)
            refs.append(demo[key])
    _zoom(ax, pts, refs)
    ax.set_xlabel("version")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"benchmark loss ({unit})" if unit else "benchmark loss")
    ax.set_title("Benchmark loss per version")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)  # beside, never on a line
    path = out / "loss_per_version.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _zoom(ax, pts, refs) -> None:
    """Scale the loss axis to where the ledger and the reference lines are: genesis, far above them,
    would squash the gap the plot is about; its point is then named at the top edge."""
    later = [loss for v, loss in pts if v > 0] + refs
    genesis = next((loss for v, loss in pts if v == 0), None)
    if not later or genesis is None:
        return
    lo, hi = min(later), max(later)
    pad = max((hi - lo) * 0.15, 0.01)
    if genesis > hi + 4 * pad:
        ax.set_ylim(lo - pad, hi + 2 * pad)
        ax.annotate(f"genesis {genesis:.2f} (above)", xy=(0, hi + 2 * pad), xytext=(4, -12),
                    textcoords="offset points", fontsize=8, color="#555")


def _plot_contributors(prs, out: Path) -> Path:
    who = sorted({p.contributor or "?" for p in prs})
    fig, ax = plt.subplots(figsize=(7, 3.2))
    bottom = [0] * len(who)
    for state, colour in (("merged", "#2a9d8f"), ("rejected", "#e76f51"), ("open", "#e9c46a"),
                          ("withdrawn", "#999999"), ("expired", "#b5838d")):
        counts = [sum(1 for p in prs if (p.contributor or "?") == w and p.state == state) for w in who]
        ax.bar(who, counts, bottom=bottom, color=colour, label=state)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_ylabel("pull requests")
    ax.set_title("Pull requests per contributor")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)  # beside the bars
    path = out / "contributors.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _plot_staleness(prs, out: Path) -> Path:
    judged = sorted((p for p in prs if p.staleness is not None), key=lambda p: p.id)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = list(range(1, len(judged) + 1))
    colours = ["#2a9d8f" if p.state == "merged" else "#e76f51" for p in judged]
    ax.scatter(xs, [p.staleness for p in judged], c=colours, label="staleness")
    ax.set_xlabel("verdict (submission order)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("staleness")
    ax2 = ax.twinx()
    ax2.plot(xs, [p.attenuation for p in judged], color="#264653", alpha=0.6, label="attenuation")
    ax2.set_ylabel("attenuation")
    ax2.set_ylim(0, 1.05)
    ax.set_title("Staleness (green merged, red rejected) and attenuation")
    path = out / "staleness.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _markdown(name, versions, prs, demo) -> str:
    head = versions[-1]
    merged = sum(p.state == "merged" for p in prs)
    rejected = [p for p in prs if p.state == "rejected"]
    losses = [v.metrics["loss"] for v in versions if v.metrics and "loss" in v.metrics]
    lines = [f"# Ledger report: {name}", "",
             f"- current version: **{head.version}** (`{head.commit[:12]}`)",
             f"- pull requests: {len(prs)} ({merged} merged, {len(rejected)} rejected, "
             f"{sum(p.state == 'open' for p in prs)} open)"]
    if demo and demo.get("genesis_loss") is not None:
        lines.append(f"- benchmark loss: genesis {demo['genesis_loss']:.4f} -> now "
                     f"{demo.get('final_loss') or float('nan'):.4f}")
        for key, label, _, _ in REFERENCE_LINES:
            if demo.get(key) is not None:
                lines.append(f"- {label}: {demo[key]:.4f}")
        for sentence in (regime_sentence(demo), joining_sentence(demo)):
            if sentence:
                lines.append(f"- {sentence}")
    elif losses:
        lines.append(f"- benchmark loss now: {losses[-1]:.4f}")
    facts = version_facts(versions)
    if facts["best_version"] is not None:
        lines.append(f"- {facts_sentence(facts)}")
    if rejected:
        lines += ["", "## Rejections by kind", "", "| kind | count |", "|---|---|"]
        for kind, n in rejection_kinds(prs).items():
            lines.append(f"| {kind.replace('|', '/')} | {n} |")
    lines += ["", "## Versions", "", "| version | contributor | base | staleness | attenuation | loss |",
              "|---|---|---|---|---|---|"]
    for v in reversed(versions[-20:]):
        value = _loss(v, versions)
        loss = "-" if value is None else f"{value:.4f}"
        att = "-" if v.attenuation is None else f"{v.attenuation:.3f}"
        lines.append(f"| {v.version} | {_who(v)} | {v.base_version if v.base_version is not None else '-'} "
                     f"| {v.staleness if v.staleness is not None else '-'} | {att} | {loss} |")
    return "\n".join(lines) + "\n"


def _who(v) -> str:
    """The version's contributor, and the version it reverts when it is a revert (woolf revert)."""
    who = v.contributor or "-"
    return who if v.reverts is None else f"{who} (revert of v{v.reverts})"


def _fmt_loss(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _html(name, md_tables_versions, prs, plots, demo, unit: str = "") -> str:
    def img(p: Path) -> str:
        data = base64.b64encode(p.read_bytes()).decode()
        caption = CAPTIONS.get(p.stem, p.stem)
        if p.stem == "loss_per_version" and not _references_drawn(demo):  # a hub clone's: no reference runs
            caption = "Benchmark loss of every merged version (lower is better)."
        if p.stem == "loss_per_version" and unit:
            caption = caption.replace("Benchmark loss", f"Benchmark loss ({unit})", 1)
        caption = html.escape(caption)
        return (f'<figure><img alt="{caption}" src="data:image/png;base64,{data}">'
                f'<figcaption>{caption}</figcaption></figure>')

    rows = "".join(
        f"<tr><td>{v.version}</td><td><code>{v.commit[:10]}</code></td><td>{html.escape(_who(v))}</td>"
        f"<td>{'-' if v.base_version is None else v.base_version}</td>"
        f"<td>{'-' if v.staleness is None else v.staleness}</td>"
        f"<td>{'-' if v.attenuation is None else f'{v.attenuation:.3f}'}</td>"
        f"<td>{_fmt_loss(_loss(v, md_tables_versions))}</td></tr>"
        for v in reversed(md_tables_versions))
    pr_rows = "".join(
        f"<tr class='{p.state}'><td><code>{html.escape(p.id)}</code></td><td>{html.escape(p.contributor or '?')}</td>"
        f"<td>{p.state}</td><td>{p.base_version}</td><td>{'' if p.staleness is None else p.staleness}</td>"
        f"<td>{'' if p.version is None else p.version}</td><td>{html.escape(p.reason or '')}</td></tr>"
        for p in prs)
    summary = ""
    if demo:
        items = {k: demo.get(k) for k in LABELS if demo.get(k) is not None and demo.get(k) is not False}

        def fmt(k, v):
            if v is True:
                return "yes"
            if isinstance(v, float):
                return f"{v:.1f}" if k.endswith("seconds") else f"{v:.4f}"
            return html.escape(str(v))

        summary = "<table id='summary'>" + "".join(
            f"<tr><th>{LABELS[k]}</th><td>{fmt(k, v)}</td></tr>" for k, v in items.items()) + "</table>"
    facts = version_facts(md_tables_versions)
    words = f"<p id='story'>{html.escape(facts_sentence(facts))}</p>"
    for key, sentence in (("regime", regime_sentence(demo or {})), ("joining", joining_sentence(demo or {}))):
        if sentence:
            words += f"<p id='{key}'>{html.escape(sentence.replace('`', ''))}</p>"
    kinds = rejection_kinds(prs)
    if kinds:
        words += ("<h2>Rejections by kind</h2><table id='rejections'><tr><th>kind</th><th>count</th></tr>"
                  + "".join(f"<tr><td>{html.escape(k)}</td><td>{n}</td></tr>" for k, n in kinds.items())
                  + "</table>")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>woolf report: {html.escape(name)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;margin:1em 0;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}
tr.merged td:nth-child(3){{color:#2a9d8f}}tr.rejected td:nth-child(3){{color:#e76f51}}
figure{{display:inline-block;margin:0.5em}}img{{max-width:100%}}</style></head>
<body><h1>Ledger report: {html.escape(name)}</h1><p>generated {now}</p>{words}{summary}
<section id="plots">{''.join(img(p) for p in plots)}</section>
<h2>Versions</h2><table id="versions"><tr><th>version</th><th>commit</th><th>contributor</th><th>base</th>
<th>staleness</th><th>attenuation</th><th>loss</th></tr>{rows}</table>
<h2>Pull requests</h2><table id="prs"><tr><th>id</th><th>contributor</th><th>state</th><th>base</th>
<th>staleness</th><th>version</th><th>reason</th></tr>{pr_rows}</table></body></html>
"""


def build_report(ledger, out: Path, demo: dict | None = None) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    versions, prs = _collect(ledger)
    name = ledger.config.name
    unit = loss_unit(ledger.config.workload.name)
    plots = [_plot_loss(versions, out, demo, unit), _plot_contributors(prs, out), _plot_staleness(prs, out)]
    scoring = scoring_section(ledger, out)  # leaderboard, ratings over time, credit (report/scoring.py)
    plots += [scoring.plot] if scoring.plot else []
    md = out / "summary.md"
    md.write_text(_markdown(name, versions, prs, demo) + scoring.markdown)
    page = out / "index.html"
    page.write_text(_html(name, versions, prs, plots, demo, unit).replace("</body>", scoring.html + "</body>"))
    return {"html": page, "markdown": md, "plots": plots}
