"""Text drawing for the TUI's small charts: bars, column charts on a time
axis, the per-worker Gantt rows. Pure functions returning rich Text, so the
widgets stay thin and these are testable without an app.

Only block characters and styles: no images, no extra dependency. Colours
are plain ANSI names so NO_COLOR (Textual strips colour) still leaves the
shapes readable.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from rich.text import Text

from ..analyze.timeline import SeriesPoint, Span
from .. import units as fmt

EIGHTHS = " ▁▂▃▄▅▆▇█"
PHASE_STYLES: dict[str, tuple[str, str]] = {
    # two shades per phase: neighbouring items on one row stay distinguishable
    "copy": ("black on dark_cyan", "black on cyan"),
    "index": ("white on blue", "black on bright_blue"),
    "constraint": ("black on yellow", "black on bright_yellow"),
    "lock-wait": ("bold white on red", "bold white on dark_red"),
    "vacuum": ("white on magenta", "black on bright_magenta"),
    "analyze": ("white on magenta", "black on bright_magenta"),
    "backup": ("black on green", "black on bright_green"),
    "restore": ("black on green", "black on bright_green"),
    "starting": ("black on grey70", "black on white"),
    "estimating": ("black on grey70", "black on white"),
    "finishing": ("black on grey70", "black on white"),
    "checkpoint": ("black on yellow", "black on bright_yellow"),
    "archive-wait": ("black on yellow", "black on bright_yellow"),
    "wal-files": ("black on dark_cyan", "black on cyan"),
    "sync": ("black on grey70", "black on white"),
    "validate": ("black on dark_sea_green", "black on pale_green3"),
}
BACKUP_PHASES = ("starting", "estimating", "backup", "checkpoint", "archive-wait", "wal-files",
                 "restore", "finishing", "sync", "validate")
# an item too short for its name: a solid block in the phase's colour (still
# a block, not a gap, when NO_COLOR strips the colour)
PHASE_SHORT = {"copy": ("dark_cyan", "cyan"), "index": ("blue", "bright_blue"),
               "constraint": ("yellow", "bright_yellow"), "lock-wait": ("red", "bright_red"),
               "vacuum": ("magenta", "bright_magenta"), "analyze": ("magenta", "bright_magenta"),
               "backup": ("green", "bright_green"), "restore": ("green", "bright_green"),
               "finishing": ("grey70", "white"), "checkpoint": ("yellow", "bright_yellow"),
               "starting": ("grey70", "white"), "estimating": ("grey70", "white"),
               "archive-wait": ("yellow", "bright_yellow"), "wal-files": ("dark_cyan", "cyan"),
               "sync": ("grey70", "white"), "validate": ("dark_sea_green", "pale_green3")}


def bar(frac: float | None, width: int, style: str = "green") -> Text:
    """A horizontal bar with eighth-cell resolution; dots when unknown."""
    width = max(1, width)
    if frac is None:
        return Text("·" * width, style="dim")
    cells = max(0.0, min(1.0, frac)) * width
    full = int(cells)
    part = round((cells - full) * 8)
    if part == 8:
        full, part = full + 1, 0
    s = "█" * full
    if full < width and part:
        s += "▏▎▍▌▋▊▉"[part - 1]
    t = Text(s, style=style)
    t.append("░" * (width - len(s)), style="dim")
    return t


def resample(series: Sequence[SeriesPoint], width: int, t_end: float,
             value: Any) -> list[float | None]:
    """One value per column over [0, t_end]: the mean of the points in the
    column's time slice, the previous column's value when a slice holds no
    point (samples are slower than columns early in a run)."""
    width = max(1, width)
    if not series or t_end <= 0:
        return [None] * width
    buckets: list[list[float]] = [[] for _ in range(width)]
    for p in series:
        i = min(width - 1, int(p.t / t_end * width))
        v = value(p)
        if v is not None:
            buckets[i].append(float(v))
    out: list[float | None] = []
    last: float | None = None
    first_t = series[0].t
    for i, b in enumerate(buckets):
        if b:
            last = sum(b) / len(b)
            out.append(last)
        elif (i + 1) * t_end / width <= first_t:
            out.append(None)  # before the first sample: unknown, not zero
        else:
            out.append(last)
    return out


def append_runs(out: Text, cells: Iterable[tuple[str, str]]) -> None:
    """Append (character, style) cells, one span per run of a style: a span
    per cell makes every redraw convert and compose thousands of styles."""
    run: list[str] = []
    run_style: str | None = None
    for ch, st in cells:
        if st != run_style and run:
            out.append("".join(run), style=run_style or "")
            run = []
        run_style = st
        run.append(ch)
    if run:
        out.append("".join(run), style=run_style or "")


def columns(values: Sequence[float | None], rows: int, vmax: float,
            style: str = "cyan") -> list[Text]:
    """A column chart `rows` high, eighth-row resolution, top row first."""
    rows = max(1, rows)
    full_block = EIGHTHS[8]
    cols: list[str] = []  # each value's column, top row first
    for v in values:
        eighths = 0 if v is None or vmax <= 0 else round(max(0.0, v) / vmax * rows * 8)
        full, part = divmod(max(0, min(eighths, rows * 8)), 8)
        top = EIGHTHS[part] if full < rows else ""
        cols.append(EIGHTHS[0] * (rows - full - len(top)) + top + full_block * full)
    return [Text("".join(line), style=style) for line in zip(*cols, strict=True)] \
        if cols else [Text("", style=style) for _ in range(rows)]


def throughput_chart(series: Sequence[SeriesPoint], width: int, height: int,
                     jobs: int | None) -> Text:
    """Total bytes/s over time, and under it the active workers on the same
    time axis (a digit per column), then the time axis."""
    gutter = 8
    cols = max(4, width - gutter)
    t_end = series[-1].t if series else 0.0
    rates = resample(series, cols, t_end, lambda p: p.bytes_per_s)
    active = resample(series, cols, t_end, lambda p: p.active_workers)
    known = [v for v in rates if v is not None]
    vmax = max(known) if known else 0.0
    rows = max(1, height - 2)
    body = columns(rates, rows, vmax if vmax > 0 else 1.0)
    out = Text(no_wrap=True, overflow="crop")
    for r, line in enumerate(body):
        label = fmt.rate(vmax) if r == 0 else ("0 B/s" if r == rows - 1 else "")
        out.append(f"{label[:gutter - 1]:>{gutter - 1}}│", style="dim")
        out.append_text(line)
        out.append("\n")
    out.append(f"{'workers':>{gutter - 1}}│", style="dim")
    top = max([jobs or 0] + [round(a) for a in active if a is not None])
    cells: list[tuple[str, str]] = []
    for a in active:
        if a is None:
            cells.append((" ", ""))
            continue
        n = round(a)
        ch = str(n) if top <= 9 else EIGHTHS[max(1, round(n / max(1, top) * 8))]
        cells.append((ch, "bold green" if n and jobs and n >= jobs else
                       ("yellow" if n else "dim")))
    append_runs(out, cells)
    out.append("\n")
    out.append_text(time_axis(t_end, cols, gutter))
    return out


def time_axis(t_end: float, cols: int, gutter: int) -> Text:
    left = "0 s"
    right = fmt.duration(t_end)
    mid = fmt.duration(t_end / 2) if cols >= 36 else ""
    line = [" "] * cols
    for i, ch in enumerate(left):
        if i < cols:
            line[i] = ch
    if mid:
        start = cols // 2 - len(mid) // 2
        for i, ch in enumerate(mid):
            line[start + i] = ch
    for i, ch in enumerate(reversed(right)):
        if cols - 1 - i >= 0:
            line[cols - 1 - i] = ch
    return Text(" " * (gutter - 1) + "└" + "".join(line), style="dim", no_wrap=True)


def gantt(spans: Mapping[int, Sequence[Span]], t_end: float, width: int,
          idle: Mapping[int, float] | None = None, max_rows: int | None = None,
          phases: Collection[str] | None = None, t_first: float = 0.0) -> Text:
    """One row per worker: its items as coloured blocks on the time axis,
    named where the block is wide enough; dots are idle gaps; blank before
    the first sample (t_first: the job ran before the monitor saw it). The
    idle share at the end of each row makes the long tail a number too.
    phases: the phases the spans hold, when the caller keeps them (else read
    from the spans)."""
    gutter = 8
    suffix = 10 if idle is not None and width >= 60 else 0
    cols = max(4, width - gutter - suffix)
    out = Text(no_wrap=True, overflow="crop")
    pids = list(spans)
    shown = pids if max_rows is None else pids[:max_rows]
    # the columns that end before the first sample: not idle, unseen
    unseen = 0 if t_end <= 0 else min(cols, int(t_first / t_end * cols))
    for pid in shown:
        row = spans[pid]
        cells = (_row_by_column(row, t_end, cols) if len(row) > 2 * cols
                 else _row_by_span(row, t_end, cols))
        for i in range(unseen):
            if cells[i][0] == "·":
                cells[i] = (" ", "")
        out.append(f"{str(pid)[:gutter - 1]:>{gutter - 1}}│", style="bold")
        append_runs(out, cells)
        if suffix and idle is not None:
            out.append(f" idle {100 * idle.get(pid, 0.0):3.0f}%", style="dim")
        out.append("\n")
    if max_rows is not None and len(pids) > max_rows:
        out.append(f"{'':>{gutter - 1}} … {len(pids) - max_rows} more workers\n", style="dim")
    out.append_text(time_axis(t_end, cols, gutter))
    if width >= 100:
        out.append("\n" + " " * gutter)
        seen = (set(phases) if phases is not None
                else {sp.phase for row in spans.values() for sp in row})
        backup = bool(seen & set(BACKUP_PHASES))
        for phase, (style, _) in PHASE_STYLES.items():
            if backup and phase not in seen:
                continue  # a backup's timeline: its own phases only
            if phase == "analyze" or (phase == "vacuum" and not seen & {"vacuum", "analyze"}):
                continue  # maintenance (a load's last step) only when it ran
            if phase in BACKUP_PHASES and phase not in seen:
                continue  # a backup's phases in a backup's timeline only
            out.append(" vacuum/analyze " if phase == "vacuum" else f" {phase} ", style=style)
            out.append(" ")
        out.append(" · idle", style="dim")
    return out


def _col(t: float, t_end: float, cols: int) -> int:
    if t_end <= 0:
        return 0
    return max(0, min(cols - 1, int(t / t_end * cols)))


def _short(item: str) -> str:
    # the schema is noise in a block a few cells wide
    return item.split(".", 1)[1] if item.startswith("public.") else item

def _cell(sp: Span, n: int, a: int, b: int, i: int) -> tuple[str, str]:
    """Column i of span number n, which covers columns a..b-1 (b > a)."""
    if b - a >= 4:  # room for (the start of) its name on a coloured block
        label = _short(sp.item)
        k = i - a
        return (label[k] if k < len(label) else " ",
                PHASE_STYLES.get(sp.phase, ("reverse", "reverse"))[n % 2])
    return ("█", PHASE_SHORT.get(sp.phase, ("bold", "bold"))[n % 2])


def _row_by_span(row: Sequence[Span], t_end: float, cols: int) -> list[tuple[str, str]]:
    """A worker's row, its spans painted in time order (a later one over an
    earlier one in a column they share)."""
    cells: list[tuple[str, str]] = [("·", "dim")] * cols
    for n, sp in enumerate(row):
        a, b = _col(sp.start, t_end, cols), _col(sp.end, t_end, cols)
        b = max(b, a + 1)  # an item shorter than a column still shows
        for i in range(a, min(b, cols)):
            cells[i] = _cell(sp, n, a, b, i)
    return cells


def _row_by_column(row: Sequence[Span], t_end: float, cols: int) -> list[tuple[str, str]]:
    """The same row as _row_by_span, column by column: the span a column
    shows is the last one starting in or before it (a worker's spans are in
    time order and never overlap), found by bisection, so a row of thousands
    of items costs a screen's width of lookups, not one per item."""
    cells: list[tuple[str, str]] = [("·", "dim")] * cols
    n_spans = len(row)
    k = -1
    for i in range(cols):
        # the last span whose start column is <= i
        k = max(k, bisect.bisect_left(row, (i + 1) * t_end / cols,
                                      key=lambda sp: sp.start) - 1)
        while k + 1 < n_spans and _col(row[k + 1].start, t_end, cols) <= i:
            k += 1
        while k >= 0 and _col(row[k].start, t_end, cols) > i:
            k -= 1
        if k < 0:
            continue
        sp = row[k]
        a, b = _col(sp.start, t_end, cols), _col(sp.end, t_end, cols)
        b = max(b, a + 1)
        if i < b:
            cells[i] = _cell(sp, k, a, b, i)
    return cells



def cpu_cores(per_cpu: Sequence[Any], width: int) -> Text:
    """Per core: a one-cell block each when there are many, a bar each when
    there is room. Entries are busy % numbers, or dicts with user / system /
    iowait / busy (shown split when present)."""
    out = Text(no_wrap=True)
    if not per_cpu:
        return Text("per core: n/a", style="dim")
    if len(per_cpu) > 16 or width < 30:
        out.append("cores ", style="dim")
        for c in per_cpu:
            b = _busy(c)
            out.append(EIGHTHS[max(1, round((b or 0) / 100 * 8))], style=_load_style(b))
        return out
    bw = max(5, width - 11)
    for i, c in enumerate(per_cpu):
        out.append(f"{i:>3} ", style="dim")
        if isinstance(c, Mapping) and c.get("user") is not None:
            parts = [(float(c.get("user") or 0), "green"), (float(c.get("system") or 0), "red"),
                     (float(c.get("iowait") or 0), "yellow")]
            used = 0
            for v, st in parts:
                n = round(v / 100 * bw)
                n = min(n, bw - used)
                out.append("█" * n, style=st)
                used += n
            out.append("░" * (bw - used), style="dim")
        else:
            out.append_text(bar((_busy(c) or 0) / 100, bw, _load_style(_busy(c))))
        out.append(f" {_busy(c) or 0:3.0f}%")
        if i < len(per_cpu) - 1:
            out.append("\n")
    return out


def _busy(c: Any) -> float | None:
    if isinstance(c, Mapping):
        v = c.get("busy")
        return None if v is None else float(v)
    return None if c is None else float(c)


def _load_style(pct: float | None) -> str:
    if pct is None:
        return "dim"
    return "red" if pct >= 90 else ("yellow" if pct >= 60 else "green")
