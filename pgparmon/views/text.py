"""Headless views of the sample stream: a compact rich screen for a terminal,
one plain line per sample for a pipe, and the end-of-run summary."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from .. import units as fmt
from ..sample import Sample
from .summary import EndSummary, ItemGroup, fit_columns, row_cells


def _bar(frac: float | None, width: int = 20) -> str:
    if frac is None:
        return "·" * width
    n = int(round(max(0.0, min(1.0, frac)) * width))
    return "█" * n + "░" * (width - n)


def headline(s: Sample) -> str:
    j = s.job
    prog = f"{j.progress:.1%}" if j.progress is not None else "n/a"
    eta = fmt.eta(j.eta_s, j.eta_reason)
    jobs = f" -j {j.jobs}" if j.jobs else ""
    where = "whole cluster" if j.scope == "cluster" else (j.database or "")
    phase = f" ({j.phase})" if j.backup and j.phase else ""
    return (f"{j.kind}{jobs} {where} [{j.state}]{phase} "
            f"elapsed {fmt.duration(s.elapsed_s)} progress {prog} ETA {eta} "
            f"{fmt.rate(j.bytes_per_s)} "
            f"items {j.items_done}/{j.items_total}")


def plain_line(s: Sample) -> str:
    b = s.bottleneck
    act = sum(1 for w in s.workers if w.phase != "idle")
    return f"{s.ts} {headline(s)} workers {act} | {b.kind}: {b.detail}"


def screen(s: Sample) -> Group:
    j = s.job
    head = Text()
    head.append(headline(s), style="bold")
    b = s.bottleneck
    verdict = Text(f"limit: {b.kind} — {b.detail}",
                   style="yellow" if b.kind not in ("nothing", "starting") else "green")
    bar = Text(f"{_bar(j.progress, 40)} {j.progress or 0:.1%}")
    t = Table(box=None, expand=False, pad_edge=False, header_style="bold")
    for col in ("pid", "client", "phase", "relation / item", "rate", "rows/s", "done", "wait"):
        t.add_column(col)
    for w in s.workers:
        style = "red" if w.phase == "lock-wait" else None
        blk = f" ← {','.join(map(str, w.blocked_by))}" if w.blocked_by else ""
        t.add_row(str(w.pid), str(w.client_pid or "-"), w.phase,
                  (w.item or w.relation or "")[:40],
                  fmt.rate(w.bytes_per_s),
                  f"{w.tuples_per_s:.0f}" if w.tuples_per_s else "-",
                  _bar(w.progress, 10), (w.wait_event or "CPU") + blk, style=style)
    h = s.host
    host = Text(f"host CPU {h.cpu_percent or 0:.0f}% (iowait "
                f"{h.iowait_percent or 0:.0f}%) per core "
                + " ".join(f"{c or 0:.0f}" for c in h.per_cpu))
    disks = [Text(f"  {n}: read {fmt.rate(d.read_bytes_per_s)} write "
                  f"{fmt.rate(d.write_bytes_per_s)} util {d.util_percent or 0:.0f}%"
                  f" await {d.await_ms if d.await_ms is not None else '-'} ms")
             for n, d in h.disks.items()]
    notes = [Text(f"! {n}", style="magenta") for n in s.notes][-4:]
    err = s.server.error
    extra = [Text(f"server: {err}", style="red")] if err else []
    return Group(head, bar, verdict, t, host, *disks, *extra, *notes)


STATE_STYLES = {"finished": "bold green", "ended": "bold yellow"}
TERMINAL_ROWS = 40  # item rows on a terminal; `pgparmon report --html` lists every item


def summary_head(es: EndSummary) -> Text:
    """"pg_dump -j 4 on db: finished in 3 min 05 s; 120/120 items, 1.2 GB
    COPY data": the first line of every end-of-run view."""
    f = es.facts
    head = Text()
    head.append(f.kind + (f" -j {f.jobs}" if f.jobs else ""), style="bold")
    head.append(f" on {f.database}: ")
    head.append(f.state, style=STATE_STYLES.get(f.state, "bold red"))
    if f.reason:
        head.append(f" ({f.reason})")
    what = "streamed" if f.scope == "cluster" else "COPY data"
    head.append(f" in {fmt.duration(f.wall_s)}; {f.items_done}/{f.items_total} items, "
                f"{fmt.size(f.copy_bytes)} {what}")
    return head


class ItemsTable:
    """The item rows, longest first then the groups of short items. Whole
    names: the start, worker, state, bytes/s and rows columns give way, in
    that order, until the widest name fits (narrower still, names fold onto
    more lines, never cut)."""

    COLUMNS = ("kind", "worker", "state", "start", "duration", "bytes", "rows", "bytes/s")
    DROP = ("start", "worker", "state", "bytes/s", "rows")

    def __init__(self, es: EndSummary, limit: int = TERMINAL_ROWS) -> None:
        self.es, self.limit = es, limit

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        es, w = self.es, options.max_width
        rows = es.rows[:self.limit]
        short = w < 100  # as the TUI: no `public.` on a small screen
        labels = [r.label(short) for r in rows]
        cells = [row_cells(r, es.interval, exact_rows=True) for r in rows]
        # each column after the item costs its widest cell and 2 of padding
        widths = {c: max([len(c), *(len(x[c]) for x in cells)]) + 2 for c in self.COLUMNS}
        label_w = max([16, *(cell_len(x) for x in labels)])
        cols = fit_columns(widths, w, label_w + 1, self.DROP)
        room = w - 1 - sum(widths[c] for c in cols)
        t = Table(box=None, header_style="bold", pad_edge=False)
        t.add_column("item", overflow="fold", ratio=1, min_width=max(16, min(label_w, room)))
        for col in cols:
            t.add_column(col, justify="left" if col in ("kind", "state") else "right",
                         no_wrap=True)
        for r, label, c in zip(rows, labels, cells, strict=True):
            style = ("dim" if isinstance(r, ItemGroup)
                     else "red" if r.state not in ("done", "running") else None)
            t.add_row(label, *(c[k] for k in cols), style=style)
        yield t
        rest = es.rows[self.limit:]
        if rest:
            n = sum(r.count if isinstance(r, ItemGroup) else 1 for r in rest)
            yield Text(f"… and {n} more items (pgparmon report --html lists them all)",
                       style="dim")


def summary_table(es: EndSummary) -> Group:
    """`pgparmon run`'s last print: the head line and the items."""
    return Group(summary_head(es), ItemsTable(es))
