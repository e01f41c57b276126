"""The advice on a terminal: the answer first (the -j to use, how long, the
command), then the table of every j considered, then what would bite."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..redact import redact_text
from .. import units as fmt
from .document import Advice
from .kinds import kind_named

_BASIS = {"probe": "a probe of this system", "history": "recordings of earlier runs",
          "timings": "the timings given", "static": "static facts only: a guess"}


def render(a: Advice) -> RenderableType:
    rec = a.prediction(a.recommended)
    kind = kind_named(a.kind)
    head = Text()
    head.append(f"{kind.label}: {kind.use_words.format(n=a.recommended)}", style="bold green")
    if rec:
        head.append(f"  predicted {fmt.duration(rec.wall_s)}", style="bold")
    if a.fastest != a.recommended:
        fast = a.prediction(a.fastest)
        head.append(f"   (fastest -j {a.fastest}: {fmt.duration(fast.wall_s if fast else None)})")
    basis = Text(f"basis: {_BASIS.get(a.basis, a.basis)}; confidence {a.confidence}",
                 style="dim" if a.basis != "static" else "yellow")
    parts: list[RenderableType] = [head, basis]
    if a.inventory is not None and a.inventory.items:
        inv = a.inventory
        big = inv.largest
        parts.append(Text(f"{len(inv.tables)} tables, {fmt.size(inv.data_bytes)} of data"
                          + (f", largest item {big.label} {fmt.size(big.work)}" if big else ""),
                          style="dim"))
    if a.copy is not None:
        c = a.copy
        parts.append(Text(f"{c['file']}: {fmt.size(c['data_bytes'])} of {c['format']} into "
                          f"{c['table']} ({c['indexes']} index(es), "
                          f"{'logged' if c['logged'] else 'unlogged'}); index maintenance "
                          f"{c['index_maintenance']}"
                          + (f"; the indexes' growth {c['index_growth']}"
                             if c.get("index_growth") not in (None, "none") else ""),
                          style="dim"))
    if a.subscription is not None:
        parts.append(_subscription_line(a.subscription))
    if a.lower_bound_s is not None and kind.whole_items:
        parts.append(Text(f"lower bound at -j {a.recommended}: {fmt.duration(a.lower_bound_s)} "
                          "(largest item alone, or all work at full throughput)", style="dim"))
    parts.append(Text(""))
    parts.append(Text("command: ", style="bold").append(redact_text(a.command), style="cyan"))
    if a.settings:
        parts.append(Text("settings:", style="bold"))
        for c in a.settings:
            need = "needed" if c["required"] else f"to allow {c['for_jobs']}"
            line = Text(f"  on the {c['side']}: ")
            line.append(redact_text(c["command"]), style="cyan")
            line.append(f"  ({need}; now {c['now']})", style="dim")
            parts.append(line)
    parts.append(Text(""))

    parts.append(_predictions(a, kind.jobs_heading))
    if any(p.extrapolated for p in a.predictions):
        parts.append(Text("* beyond the measured job counts", style="dim"))
    if a.why:
        parts.append(Text(""))
        for w in a.why:
            parts.append(Text(f"  {redact_text(w)}"))
    if a.probe:
        pr = a.probe
        ks = sorted({int(p["streams"]) for p in pr.get("points") or []})
        skipped = pr.get("skipped_streams") or []
        parts.append(Text(f"probe: {fmt.duration(pr.get('seconds', 0))} of a "
                          f"{fmt.duration(pr.get('budget_s', 0))} budget, "
                          f"{len(pr.get('points') or [])} steps"
                          + (f" at {', '.join(map(str, ks))} streams" if ks else "")
                          + (f" ({', '.join(map(str, skipped))} skipped for the budget)"
                             if skipped else ""), style="dim"))
    if a.warnings:
        parts.append(Text(""))
        for caution in a.warnings:
            line = Text("! ", style="bold yellow")
            line.append(f"{caution.code}: ", style="yellow")
            line.append(redact_text(caution.message))
            parts.append(line)
    for n in a.notes:
        parts.append(Text(f"note: {redact_text(n)}", style="dim"))
    return Group(*parts)


def _predictions(a: Advice, heading: str) -> Table:
    """The predicted time at each job count, what limits it, and the
    recommended and fastest marked."""
    t = Table(box=None, pad_edge=False, header_style="bold")
    t.add_column(heading, justify="right")
    t.add_column("predicted", justify="right")
    has_measured = any(p.measured_s is not None for p in a.predictions)
    if has_measured:
        t.add_column("measured", justify="right")
    t.add_column("limited by")
    for p in a.predictions:
        mark = ""
        if p.jobs == a.recommended:
            mark = " <- recommended"
        elif p.jobs == a.fastest:
            mark = " <- fastest"
        style = "bold green" if p.jobs == a.recommended else None
        row = [str(p.jobs), fmt.duration(p.wall_s) + ("*" if p.extrapolated else "")]
        if has_measured:
            row.append(fmt.duration(p.measured_s))
        row.append(p.bottleneck + mark)
        t.add_row(*row, style=style)
    return t


def _subscription_line(sub: dict[str, object]) -> Text:
    """What a subscription's sync copies, from where, and its largest table."""
    alone = sub.get("largest_alone_s")
    return Text(f"{sub['tables']} table(s), {fmt.size(sub['bytes'])} from the publisher "
                f"({sub['publisher']}); largest {sub['largest_table']} "
                f"{fmt.size(sub['largest_bytes'])}"
                + (f", about {fmt.duration(alone)} alone on one sync worker" if alone else "")
                + f"; {sub['tables_with_indexes']} with indexes on the subscriber",
                style="dim")


def print_advice(a: Advice, console: Console | None = None) -> None:
    (console or Console()).print(render(a))
