"""The TUI's widgets: each holds the little state it draws as reactive
attributes and renders from it; none computes rates or talks to the feed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Self

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.segment import Segment
from rich.text import Text
from textual.geometry import Region, Size
from textual.reactive import Reactive, reactive
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import DataTable, RichLog
from textual.widgets.data_table import ColumnKey, RowKey

from ..analyze.advice_live import LiveAdvice
from ..analyze.timeline import SeriesPoint, Span
from .. import units as fmt
from ..views.summary import EndSummary, ItemGroup, fit_columns, row_cells
from . import draw

Doc = dict[str, Any]

STATE_STYLE = {"running": "bold green", "finished": "bold cyan", "failed": "bold red",
               "ended": "bold yellow"}
GOOD_VERDICTS = ("nothing", "starting")


class TextLines(Widget):
    """A widget whose render() is one Rich Text of short lines (no wrapping),
    drawn straight to strips: each line rendered by Rich, cut to the width
    (with its ellipsis when the text asks for one), on the widget's own
    style. Textual's general path (the Text made a Content, wrapped, made
    strips) cost about twice as much for the charts and the host panel,
    which are redrawn every sample. Other renderables take that path.

    A new sample repaints only the lines that changed: a plain repaint of
    the whole widget (a reactive set with new data) is turned into a render
    a moment later whose strips are compared with the last ones, and only
    the lines that differ are marked dirty; Textual then styles, composes
    and writes those lines alone (most of a panel, its labels and the
    older part of a chart, stays as it was). A change of size, style or
    border title, or a non-Text render, repaints the whole widget."""

    _strips: list[Strip] | None = None
    _strips_size: Size | None = None
    _strips_chrome: tuple[Any, ...] | None = None
    _stale = True  # the whole widget was marked dirty: render afresh
    _diff_armed = False
    lines_repainted = 0  # lines marked dirty by the diff (tests read it)

    def _chrome(self) -> tuple[Any, ...]:
        return (self.visual_style, self.border_title, self.border_subtitle)

    def _set_dirty(self, *regions: Region) -> None:
        if not regions:
            self._stale = True
        super()._set_dirty(*regions)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        if (repaint and not (regions or layout or recompose) and self._strips is not None
                and not self._stale and self.is_mounted):
            if not self._diff_armed:
                self._diff_armed = True
                self.call_next(self._repaint_changed_lines)
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _repaint_changed_lines(self) -> None:
        self._diff_armed = False
        old = self._strips
        if (old is None or self._stale or self._strips_size != self.size
                or self._strips_chrome != self._chrome()):
            super().refresh()
            return
        r = self.render()
        if not isinstance(r, Text):
            self._strips = None
            super().refresh()
            return
        new = self._text_strips(r)
        self._strips = new
        blank = Strip.blank(self.size.width, self.visual_style.rich_style)
        width = self.content_size.width
        changed = [Region(0, y, width, 1) for y in range(max(len(old), len(new)))
                   if (old[y] if y < len(old) else blank) != (new[y] if y < len(new) else blank)]
        if changed:
            self.lines_repainted += len(changed)
            super().refresh(*changed)

    def render_line(self, y: int) -> Strip:
        if self._strips is None or self._stale or self._strips_size != self.size:
            r = self.render()
            if not isinstance(r, Text):
                self._strips = None
                return super().render_line(y)
            self._strips = self._text_strips(r)
            self._strips_size = self.size
            self._strips_chrome = self._chrome()
            self._stale = False
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def _text_strips(self, text: Text) -> list[Strip]:
        # the whole Text rendered once and its segments split at newlines:
        # a Text made per line (Text.split) cost three times as much
        width, height = self.size
        base = self.visual_style.rich_style
        ellipsis = text.overflow == "ellipsis"
        out: list[Strip] = []
        for segs in Segment.split_lines(text.render(self.app.console)):
            if len(out) >= height:
                break
            strip = Strip(Segment.apply_style(segs, base))
            if strip.cell_length > width:
                if ellipsis and width > 1:
                    last = strip.crop(width - 1, width)
                    style = last._segments[0].style if last._segments else base
                    strip = Strip.join([strip.crop(0, width - 1), Strip([Segment("…", style)])])
                else:
                    strip = strip.crop(0, width)
            out.append(strip.adjust_cell_length(width, base))
        return out


class JobHeader(TextLines):
    """Two lines: what runs where, then progress / ETA / rates."""

    doc: reactive[Doc | None] = reactive(None, always_update=True)
    label: reactive[str] = reactive("")  # PAUSED / replay position, beside the state

    def render(self) -> RenderableType:
        d = self.doc
        w = max(20, self.content_size.width)
        if d is None:
            return Text("waiting for the first sample…", style="dim")
        j = d.get("job") or {}
        l1 = Text(no_wrap=True, overflow="ellipsis")
        l1.append(str(j.get("kind") or "?"), style="bold")
        if j.get("jobs"):
            l1.append(f" -j {j['jobs']}", style="bold")
        dbs = [db for db in j.get("databases") or () if db != j.get("database")]
        where = "whole cluster" if j.get("scope") == "cluster" else str(j.get("database") or "?")
        if j.get("host_only"):
            where += " · host only, no server"
        l1.append(f"  {', '.join([where, *dbs])}")
        if j.get("format"):
            l1.append(f"  {j['format']}", style="dim")
        right = Text()
        right.append(f"elapsed {fmt.duration(d.get('elapsed_s'))}  ")
        state = str(j.get("state") or "?")
        right.append(f"● {state}", style=STATE_STYLE.get(state, "bold"))
        if self.label:
            right.append(f"  {self.label}", style="bold reverse yellow")
        target = j.get("target")
        room = w - l1.cell_len - right.cell_len - 2
        if target and room > 8:
            tgt = str(target)
            if len(tgt) > room - 3:
                tgt = "…" + tgt[-(room - 4):]
            l1.append(f"  {tgt}", style="dim")
        # how the job's sessions were found ("inferred: application_name, …"
        # reads "inferred") and where its progress comes from (a COPY job's
        # progress_basis), as room allows after the target
        extras = [str(j["grouping"]).split(":")[0] if j.get("grouping") else "",
                  # a backup's phase (the server's words) says what it waits for
                  f"phase: {j['phase']}" if j.get("backup") and j.get("phase") else "",
                  f"progress: {j['progress_basis']}" if j.get("progress_basis") else ""]
        for extra in filter(None, extras):
            if w - l1.cell_len - right.cell_len - 2 >= len(extra) + 2:
                l1.append(f"  {extra}", style="dim")
        l1.append(" " * max(1, w - l1.cell_len - right.cell_len))
        l1.append_text(right)

        prog = j.get("progress")
        pct = f"{prog:6.1%}" if prog is not None else "   n/a"
        if j.get("eta_s") is not None:
            eta = f"ETA {fmt.eta(j)}"  # "≥ 58.0 s": a part left out (eta_reason says)
        else:
            eta = f"ETA ? ({j.get('eta_reason') or 'unknown'})"
        tail = (f" {pct}  {eta}  items {j.get('items_done', 0)}/{j.get('items_total', 0)}"
                f"  {fmt.rate(j.get('bytes_per_s'))}")
        if not j.get("backup"):  # a physical backup moves files, not rows
            tail += f"  {fmt.count(j.get('tuples_per_s'))} rows/s"
        l2 = Text(no_wrap=True, overflow="ellipsis")
        bw = max(10, w - len(tail))
        l2.append_text(draw.bar(prog, bw, "bold green" if state != "failed" else "red"))
        l2.append(tail)
        return Text("\n").join([l1, l2])


class EventLog(RichLog):
    """The events panel: a RichLog whose growth asks for no layout pass.
    Each write grows its virtual size, which Textual answers with a layout
    of the whole screen (every widget re-rendered) although this panel's
    own size (1fr) does not change: here the scrollbars follow in place, and
    a layout comes only when one appears or goes (its visibility is
    reactive with layout)."""

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), repaint=True)

    def watch_virtual_size(self, size: Size) -> None:
        self._scroll_update(size)


class AutoHeight(Widget):
    """A widget of auto height whose text changes every sample: a layout pass
    (the whole screen re-rendered, twice the cost of a sample's frame) only
    when its height must change. It grows at once; it gives lines back only
    once its text has been shorter for SHRINK_AFTER_S seconds (a verdict
    whose detail wraps to two lines one second and fits in one the next kept
    the screen's body jumping and cost a layout pass a second). The height
    held is its min-height (its max-height still caps it)."""

    SHRINK_AFTER_S = 10.0
    _held = -1  # the lines held (-1: none yet)
    _shrink_timer: Timer | None = None
    layouts = 0  # layout passes asked for (for tests)

    def _text_lines(self) -> int:
        """Lines the text takes at the widget's width; -1 when unknown."""
        width = self.content_size.width or self.size.width
        if width <= 0:
            return -1
        r = self.render()
        if not isinstance(r, Text):
            return -1
        # lines that fit need no wrapping to be counted (most samples)
        parts = r.plain.split("\n")
        return (len(parts) if all(cell_len(p) <= width for p in parts)
                else len(r.wrap(self.app.console, width)))

    def _relayout_if_taller_or_shorter(self) -> None:
        lines = self._text_lines()
        if 0 <= lines < self._held:
            if self._shrink_timer is None:
                self._shrink_timer = self.set_timer(self.SHRINK_AFTER_S, self._shrink)
            self.refresh()
            return
        if self._shrink_timer is not None:
            self._shrink_timer.stop()
            self._shrink_timer = None
        if lines == self._held and lines >= 0:
            self.refresh()
        else:  # taller, or not measurable yet (no width): a layout decides
            self._hold(lines)

    def _shrink(self) -> None:
        self._shrink_timer = None
        lines = self._text_lines()
        if lines != self._held:
            self._hold(lines)

    def _hold(self, lines: int) -> None:
        self._held = lines
        self.styles.min_height = None if lines < 0 else lines + self.styles.gutter.height
        self.layouts += 1
        self.refresh(layout=True)


class VerdictLine(AutoHeight):
    """What limits the run now (the bottleneck verdict), one or two lines."""

    verdict: reactive[tuple[str, str] | None] = reactive(None)

    def watch_verdict(self) -> None:
        self._relayout_if_taller_or_shorter()

    def render(self) -> RenderableType:
        if self.verdict is None:
            return Text("limit: -", style="dim")
        kind, detail = self.verdict
        t = Text()
        t.append(f"limit: {kind}", style="bold green" if kind in GOOD_VERDICTS else
                 "bold yellow")
        t.append(f" — {detail}")
        return t


class StatusLine(TextLines):
    """Sampling cadence, pause, errors from the feed or the server, notes.
    An error sets the -error class: the line turns red and stays until a
    good sample arrives."""

    text: reactive[Text] = reactive(Text(""), always_update=True)

    def render(self) -> RenderableType:
        return self.text


class AdviceLine(AutoHeight):
    advice: reactive[LiveAdvice | None] = reactive(None)

    def watch_advice(self) -> None:
        self._relayout_if_taller_or_shorter()

    def render(self) -> RenderableType:
        a = self.advice
        if a is None:
            return Text("advice: not enough data yet", style="dim")
        t = Text()
        t.append("advice: ", style="bold")
        t.append(a.headline, style="bold magenta" if a.next_jobs else "")
        if a.detail:
            t.append("\n")
            t.append(a.detail, style="dim")
        return t


class ThroughputChart(TextLines):
    """Total COPY bytes/s over the whole run, active workers below it."""

    series: reactive[tuple[SeriesPoint, ...]] = reactive((), always_update=True)
    jobs: reactive[int | None] = reactive(None)

    def render(self) -> RenderableType:
        if not self.series:
            return Text("throughput: no samples yet", style="dim")
        return draw.throughput_chart(self.series, self.content_size.width,
                                     max(3, self.content_size.height), self.jobs)


class HostPanel(TextLines):
    """CPU per core, memory, the job's disks."""

    host: reactive[Mapping[str, Any] | None] = reactive(None, always_update=True)

    def render(self) -> RenderableType:
        h = self.host
        if not h:
            return Text("host: n/a (no sample yet, or the server is on another host)",
                        style="dim")
        w = max(20, self.content_size.width)
        t = Text(no_wrap=True, overflow="ellipsis")
        cpu = h.get("cpu_percent")
        t.append("CPU ", style="bold")
        t.append(f"{cpu:.0f}%" if cpu is not None else "n/a")
        if h.get("iowait_percent") is not None:
            t.append(f"  iowait {h['iowait_percent']:.0f}%",
                     style="yellow" if h["iowait_percent"] >= 20 else "")
        if h.get("mem_used_percent") is not None:
            t.append(f"  mem {h['mem_used_percent']:.0f}%")
        t.append("\n")
        per = list(h.get("per_cpu") or [])
        # per-core bars only when they fit beside the disks; else one cell each
        rows_left = max(1, self.content_size.height - 1 - 2 * len(h.get("disks") or {}))
        if len(per) > rows_left:
            t.append_text(draw.cpu_cores(per, 0))
        else:
            t.append_text(draw.cpu_cores(per, w))
        for name, d in (h.get("disks") or {}).items():
            t.append("\n")
            t.append(f"{name} ", style="bold")
            t.append(f"r {fmt.rate(d.get('read_bytes_per_s'))}  "
                     f"w {fmt.rate(d.get('write_bytes_per_s'))}")
            t.append("\n")
            aw = d.get("await_ms")
            q = d.get("queue_depth")
            t.append(f"  util {d.get('util_percent') or 0:.0f}%  "
                     f"await {'-' if aw is None else f'{aw:.1f}ms'}  "
                     f"queue {'-' if q is None else f'{q:.1f}'}", style="dim")
        if not h.get("disks"):
            t.append("\ndisks: none measured", style="dim")
        return t


class GanttChart(TextLines):
    """Items per worker over time: idle gaps and the long tail at a glance."""

    spans: reactive[Mapping[int, Sequence[Span]]] = reactive(dict, always_update=True)
    t_end: reactive[float] = reactive(0.0)
    t_first = 0.0  # the first sample: blank before it
    idle: reactive[Mapping[int, float]] = reactive(dict, always_update=True)
    phases: Collection[str] | None = None  # the phases of the spans (the timeline keeps them)
    max_rows: reactive[int] = reactive(8, layout=True)  # the app raises it on a tall screen
    _rows = -1  # rows drawn last time: the (auto) height changes only with them

    def watch_spans(self, spans: Mapping[int, Sequence[Span]]) -> None:
        # a layout pass re-renders the whole screen: only when the number of
        # worker rows (so this widget's height) changed, not every sample
        rows = len(spans) if len(spans) <= self.max_rows else self.max_rows + 1  # + "… more"
        if rows != self._rows:
            self._rows = rows
            self.refresh(layout=True)

    def render(self) -> RenderableType:
        if not self.spans:
            return Text("timeline: no worker seen yet", style="dim")
        return draw.gantt(self.spans, self.t_end, self.content_size.width, self.idle,
                          max_rows=self.max_rows, phases=self.phases, t_first=self.t_first)


SORTS = ("pid", "bytes/s", "progress", "phase")
# the body's and the table's own vertical scrollbars (1 cell each in the tcss),
# and one spare cell: a table one cell too wide grows a horizontal scrollbar
SCROLLBARS = 3


class WorkersTable(DataTable[Any]):
    """One row per worker. Rows are keyed by pid so the highlighted worker
    stays highlighted across refreshes and re-sorts."""

    sort_by: reactive[str] = reactive("pid")  # not `sort`: DataTable.sort() is a method

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.cell_padding = 0
        self._cols_for: int | None = None
        self._shown: dict[str, list[Any]] = {}  # the cells shown, by pid, in row order
        # rendered cells that outlive a sample: DataTable keys its cell cache
        # on a counter every update_cell moves, so one changed cell made it
        # render every cell again (header included); here a cell is rendered
        # again only when its own content changed (its version); a rebuilt
        # table drops them all (`_relaid`)
        self._cell_version: dict[tuple[str, str], int] = {}
        self._cells: dict[tuple[Any, ...], Any] = {}

    def _render_cell(self, row_index: int, column_index: int, base_style: Any, width: int,
                     cursor: bool = False, hover: bool = False) -> Any:
        row_key = (self._header_row_key if row_index == -1
                   else self._row_locations.get_key(row_index))
        col_key = self._column_locations.get_key(column_index)
        if row_key is None or col_key is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor,
                                        hover)
        key = (row_key, col_key, row_index, column_index, width, base_style, cursor, hover,
               self._show_hover_cursor, self._pseudo_class_state,
               self._cell_version.get((str(row_key.value), str(col_key.value)), 0))
        got = self._cells.get(key)
        if got is None:
            if len(self._cells) > 4096:
                self._cells.clear()
            got = self._cells[key] = super()._render_cell(row_index, column_index, base_style,
                                                          width, cursor, hover)
        return got

    def _relaid(self) -> None:
        self._cells.clear()
        self._cell_version.clear()

    def _columns(self, width: int) -> dict[str, int]:
        """Column widths for this screen width. Cells carry their own one
        space gap (cell_padding 0): DataTable's two-cell padding per column
        would not leave an 80-column screen room for the item name. Below
        100 columns the client pid moves to the details dialog only."""
        widths = {"pid": 8, "client": 8, "phase": 11, "bps": 10, "tps": 7,
                  "prog": 11 if width < 120 else 24}
        if width < 100:
            del widths["client"]
        rest = max(22, width - sum(widths.values()) - SCROLLBARS)
        widths["item"] = min(48, max(12, rest * 3 // 5))
        widths["wait"] = max(9, rest - widths["item"])
        if self._cols_for != width:
            self._relaid()
            self.clear(columns=True)
            for key, label in (("pid", "pid"), ("client", "client"), ("phase", "phase"),
                               ("item", "table / item"), ("bps", "bytes/s"),
                               ("tps", "rows/s"), ("prog", "progress"), ("wait", "wait")):
                if key in widths:
                    self.add_column(label, width=widths[key], key=key)
            self._cols_for = width
        return widths

    def highlighted_pid(self) -> int | None:
        if self.row_count == 0:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:  # noqa: BLE001 - an empty or shrinking table has no cursor cell
            return None
        return int(key.value) if key.value is not None else None

    def show(self, workers: Sequence[Mapping[str, Any]], width: int) -> None:
        """The workers as rows. When the same workers come in the same order
        (most samples), only the cells whose text changed are updated: a
        rebuilt table re-measures and redraws every row."""
        cols_for = self._cols_for
        widths = self._columns(width)
        rows = self._row_cells(workers, widths, width < 100)
        keys = [k for k, _ in rows]
        shown = self._shown
        if cols_for == width and keys == list(shown) and \
                keys == [r.key.value for r in self.ordered_rows]:
            order = [c for c in COLUMN_ORDER if c in widths]
            for i, (key, cells) in enumerate(rows):
                changed = False
                for col, new, old in zip(order, cells, shown[key], strict=True):
                    if new != old:
                        self._cell_version[(key, col)] = \
                            self._cell_version.get((key, col), 0) + 1
                        # DataTable.update_cell repaints the whole table
                        # (header, borders, blank lines): here the row alone
                        self._data[RowKey(key)][ColumnKey(col)] = new
                        self._update_count += 1
                        changed = True
                if changed:
                    self.refresh_row(i)
            self._shown = dict(rows)
            return
        keep = self.highlighted_pid()
        self._relaid()
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self._shown = dict(rows)
        if keep is not None:
            try:
                self.move_cursor(row=self.get_row_index(str(keep)), animate=False)
            except Exception:  # noqa: BLE001, S110 - that worker is gone: the cursor stays put
                pass

    def _row_cells(self, workers: Sequence[Mapping[str, Any]], widths: Mapping[str, int],
                   narrow: bool) -> list[tuple[str, list[Any]]]:
        out: list[tuple[str, list[Any]]] = []
        for w in sorted(workers, key=_sort_key(self.sort_by)):
            lock = w.get("phase") == "lock-wait"
            style = "bold red" if lock else ""
            item = str(w.get("item") or w.get("relation") or "")
            if narrow and item.startswith("public."):
                item = item[len("public."):]  # the default schema is noise on a small screen
            wait = str(w.get("wait_event") or "CPU")
            if narrow and ":" in wait:
                wait = wait.split(":", 1)[1]  # the event name says it; the type is the prefix
            if w.get("blocked_by"):
                # the blockers first: a narrow column must not clip who to look at
                wait = "← " + ",".join(map(str, w["blocked_by"])) + " " + wait.split(":")[-1]
            prog = w.get("progress")
            pcell = Text(" ")  # the gap after the right-aligned rows/s
            pcell.append_text(draw.bar(prog, widths["prog"] - 7, "red" if lock else "green"))
            pcell.append(f" {prog:4.0%}" if prog is not None else "    -")
            cells: dict[str, Any] = {
                "pid": Text(str(w["pid"]), style=style),
                "client": Text(str(w.get("client_pid") or "-"), style=style),
                "phase": Text(("⚠ " if lock else "") + str(w.get("phase") or ""),
                              style=style or ("dim" if w.get("phase") == "idle" else "")),
                "item": Text(_clip(item, widths["item"] - 1), style=style),
                "bps": Text(fmt.rate(w.get("bytes_per_s"))
                            if w.get("bytes_per_s") else "-", style=style, justify="right"),
                "tps": Text(fmt.count(w.get("tuples_per_s"))
                            if w.get("tuples_per_s") else "-", style=style, justify="right"),
                "prog": pcell,
                "wait": Text(_clip(wait, widths["wait"] - 1),
                             style="bold white on red" if lock else ""),
            }
            out.append((str(w["pid"]), _ordered(cells, widths)))
        return out


COLUMN_ORDER = ("pid", "client", "phase", "item", "bps", "tps", "prog", "wait")


def _ordered(cells: Mapping[str, Any], widths: Mapping[str, int]) -> list[Any]:
    return [cells[k] for k in COLUMN_ORDER if k in widths]


def _sort_key(sort: str) -> Any:
    if sort == "bytes/s":
        return lambda w: (-(w.get("bytes_per_s") or 0), w["pid"])
    if sort == "progress":
        return lambda w: (-(w.get("progress") or -1), w["pid"])
    if sort == "phase":
        order = {"lock-wait": 0, "copy": 1, "backup": 1, "sync": 1, "validate": 1, "index": 2,
                 "constraint": 3, "vacuum": 4, "analyze": 4, "wal": 4, "other": 5, "idle": 6}
        return lambda w: (order.get(str(w.get("phase")), 9), w["pid"])
    return lambda w: w["pid"]


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


class SummaryTable(DataTable[Any]):
    """At the end: every item with its duration and rates, longest first,
    then the short items grouped per sample interval (views/summary.py).
    Columns are as wide as their widest cell; the worker, state, bytes/s
    and rows columns give way, in that order, until the widest name fits.
    Whole names: one still too long takes two lines, it is never cut."""

    COLUMNS = (("kind", "kind"), ("worker", "worker"), ("state", "state"),
               ("duration", "duration"), ("bytes", "bytes"), ("rows", "rows"),
               ("bytes/s", "bytes/s"))
    DROP = ("worker", "state", "bytes/s", "rows")
    LEFT = ("kind", "worker", "state")

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.cell_padding = 0  # as WorkersTable: cells carry their own gap

    def show(self, es: EndSummary, width: int) -> None:
        self.clear(columns=True)
        short = width < 100  # as the workers table: no `public.` on a small screen
        labels = [r.label(short) for r in es.rows]
        cells = [row_cells(r, es.interval) for r in es.rows]
        # a left-aligned cell keeps one space after it, a right-aligned one
        # two before it
        widths = {k: max([len(h), *(len(c[k]) for c in cells)]) + (1 if k in self.LEFT else 2)
                  for k, h in self.COLUMNS}
        room = width - SCROLLBARS
        label_w = max((cell_len(x) for x in labels), default=0) + 1  # its gap
        keys = fit_columns(widths, room, label_w, self.DROP)
        rest = room - sum(widths[k] for k in keys)
        item_w = max(16, min(rest, max(60, label_w)))
        self.add_column("item", width=item_w, key="item")
        for k in keys:
            self.add_column(Text(k, justify="right") if k not in self.LEFT else k,
                            width=widths[k], key=k)
        measure = Console(width=item_w - 1)
        lines_shown = 0
        for r, label, c in zip(es.rows, labels, cells, strict=True):
            row: dict[str, Any] = {
                k: Text(c[k], justify="left" if k in self.LEFT else "right") for k in keys}
            if "state" in row and r.state != "done":
                row["state"].stylize("bold red")
            # folded a cell short of the column: the gap before the kind
            lines = Text(label, style="dim" if isinstance(r, ItemGroup) else "",
                         overflow="fold").wrap(measure, item_w - 1)
            self.add_row(Text("\n").join(lines), *(row[k] for k in keys),
                         height=max(1, len(lines)))
            lines_shown += max(1, len(lines))
        # its height, set (the tcss caps it): an auto height follows the rows
        # only once the table measured them on an idle pass, and the layout
        # that pass asks for did not always come (a table 0 rows high)
        self.styles.height = 2 + lines_shown  # its top border, the header
