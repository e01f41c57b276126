"""The live TUI: one Textual app over a feed (a live Monitor or a replay).

Sampling follows dolphie's pattern: the feed's blocking tick() runs in a
thread worker, and the next collection is armed with a one-shot timer only
after the previous one finished, so collections never overlap. A tick slower
than the interval stretches the cadence instead of queueing ticks (and the
status line says so). Nothing the feed raises ends the app: the error goes to
the status line and sampling carries on.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.events import Resize
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer

from ..analyze.advice_live import AdviceTracker
from ..analyze.timeline import SeriesPoint, TimelineBuilder
from ..feed import Feed
from .. import units as fmt
from ..sample import Sample
from ..views.summary import EndSummary, end_summary
from .screens import DetailsScreen, HelpScreen
from .widgets import (
    SORTS,
    AdviceLine,
    EventLog,
    GanttChart,
    HostPanel,
    JobHeader,
    StatusLine,
    SummaryTable,
    ThroughputChart,
    VerdictLine,
    WorkersTable,
)

Doc = dict[str, Any]  # the summary (pgparmon.summary/1)
INTERVAL_STEPS = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0)
NARROW = 120  # below this many columns the compact layout


# A live TUI keeps the first sample and the last KEEP_DOCS..2 x KEEP_DOCS.
KEEP_DOCS = 300
# The throughput chart resamples its points to the screen's columns: past
# this many, every k-th point is enough (a 24-hour run at 1 s holds 86,400;
# copying and resampling them all every sample grew with the run).
CHART_POINTS = 2048


def chart_points(series: list[SeriesPoint]) -> tuple[SeriesPoint, ...]:
    """At most CHART_POINTS (+1) of the series, evenly spaced, the first
    and the last always in."""
    n = len(series)
    if n <= CHART_POINTS:
        return tuple(series)
    step = -(-n // CHART_POINTS)  # ceil
    picked = series[::step]
    if picked[-1] is not series[-1]:
        picked.append(series[-1])
    return tuple(picked)


class PgParMonApp(App[int]):
    CSS_PATH = "pgparmon.tcss"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (NARROW, "-wide")]  # noqa: RUF012 - App's type
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]  # noqa: RUF012
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("plus,equals_sign", "slower", "+interval", key_display="+"),
        Binding("minus", "faster", "-interval", key_display="-"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("enter", "details", "Details"),
        Binding("t", "toggle_theme", "Theme"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("left_square_bracket", "step_back", "Back", show=False),
        Binding("right_square_bracket", "step_forward", "Fwd", show=False),
    ]

    def __init__(self, feed: Feed, interval: float = 1.0, title: str = "pgparmon", *,
                 autostart: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.feed = feed
        self.title = title
        self.interval = max(0.0, float(interval))
        self.autostart = autostart
        self.clock = clock  # injectable: snapshot tests freeze what the status line shows
        self.paused = False
        self.ended = False
        # the samples shown: all of them for a replay (it steps back through
        # them; the recording is in memory anyway), else the first and the
        # last KEEP_DOCS (a live run of a day holds 86,400), with every
        # sample's time kept apart for the end summary
        self.docs: list[Sample] = []
        self.times = array("d")  # every sample's elapsed_s: 8 bytes each
        self.last: Sample | None = None
        self.timeline = TimelineBuilder()
        self.advisor = AdviceTracker()
        self.summary: Doc | None = None
        self.end: EndSummary | None = None  # the summary as the end screen shows it
        self.error: str | None = None  # the feed's last exception, until a good tick
        self.latency: float | None = None
        self.stretched: float | None = None  # the effective interval when a tick was slow
        self.ticks = 0
        self._logged = 0  # timeline events already written to the log
        self._said: set[str] = set()  # notes and errors already logged
        self._verdict: str | None = None
        self._timer: Timer | None = None
        self._collecting = False

    # ---- layout --------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield JobHeader(id="header")
        yield VerdictLine(id="verdict")
        yield StatusLine(id="status")
        with VerticalScroll(id="body"):
            yield WorkersTable(id="workers")
            yield SummaryTable(id="summary")
            with Horizontal(id="middle"):
                yield ThroughputChart(id="chart")
                yield HostPanel(id="host")
            yield GanttChart(id="gantt")
            yield EventLog(id="events", max_lines=1000, wrap=False, markup=False)
        yield AdviceLine(id="advice")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#workers", WorkersTable).border_title = "workers (sort: pid)"
        self.query_one("#summary", SummaryTable).border_title = "items (longest first)"
        self.query_one("#chart").border_title = "throughput (COPY bytes/s) · active workers"
        self.query_one("#host").border_title = "host"
        self.query_one("#gantt").border_title = "timeline: items per worker"
        self.query_one("#events").border_title = "events"
        self.query_one("#summary").display = False
        self._size_gantt()
        self._show_status()
        if self.autostart:
            self._schedule(0.0)
        # a closed SSH session (SIGHUP) must end the app even while it is
        # paused or showing a finished job, when no tick would notice
        self.set_interval(0.5, self._check_stop)

    def _check_stop(self) -> None:
        if self.feed.stop:
            self.exit()

    def on_resize(self, event: Resize) -> None:
        if self.last is not None:
            self._show_workers()
        if self.end is not None:
            self.query_one("#summary", SummaryTable).show(self.end, self.size.width)
        self._size_gantt()

    def _size_gantt(self) -> None:
        self.query_one("#gantt", GanttChart).max_rows = 8 if self.size.height < 40 else 24

    # ---- sampling ------------------------------------------------------

    def _schedule(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if delay <= 0:
            # Textual's Timer divides by its delay: no zero-delay timers
            self.call_later(self._collect)
        else:
            self._timer = self.set_timer(delay, self._collect)

    @property
    def collecting(self) -> bool:
        """A tick is in flight (its sample has not been shown yet)."""
        return self._collecting

    def _collect(self) -> None:
        self._timer = None
        if self.feed.stop:
            # the CLI's feed sets stop on SIGTERM / SIGHUP (a closed SSH session)
            self.exit()
            return
        if self.paused or self.ended or self._collecting:
            return
        self._collecting = True
        self.run_worker(self._tick_in_thread, thread=True, group="tick", exclusive=True,
                        exit_on_error=False)

    def _tick_in_thread(self) -> None:
        t0 = self.clock()
        doc: Sample | None = None
        err: str | None = None
        try:
            doc = self.feed.tick()
        except Exception as exc:  # noqa: BLE001 - any failure is shown, never fatal
            err = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        latency = self.clock() - t0
        try:
            self.call_from_thread(self._collected, doc, err, latency)
        except RuntimeError:
            pass  # the app is closing: nobody to tell

    def _collected(self, doc: Sample | None, err: str | None, latency: float) -> None:
        self._collecting = False
        self.latency = latency
        self.error = err
        if doc is not None:
            try:
                self.ingest(doc)
            except Exception as exc:  # noqa: BLE001 - a malformed doc must not end the app
                self.error = f"cannot show this sample: {type(exc).__name__}: {exc}"
        self._check_end()
        if self.ended:
            self._show_status()
            return
        # the next tick starts `interval` after the last one started; a slow
        # tick pushes it to `interval` after the slow one ended (stretching)
        if self.interval > 0 and latency > self.interval:
            self.stretched = latency + self.interval
            delay = self.interval
        else:
            self.stretched = None
            delay = self.interval - latency
        self._show_status()
        if not self.paused:
            self._schedule(delay)

    def _check_end(self) -> None:
        # a replay of a recording cut before the job ended has no outcome
        # but nothing more to show
        if self.feed.outcome is None and not self.feed.ended:
            return
        if not self.ended:
            self.ended = True
            self.run_worker(self._summary_in_thread, thread=True, group="summary",
                            exit_on_error=False)

    def _summary_in_thread(self) -> None:
        try:
            summary: Doc | None = self.feed.summary()
            err = None
        except Exception as exc:  # noqa: BLE001
            summary, err = None, f"no summary: {type(exc).__name__}: {exc}"
        try:
            self.call_from_thread(self._show_summary, summary, err)
        except RuntimeError:
            pass

    # ---- showing a sample ----------------------------------------------

    def ingest(self, doc: Sample) -> None:
        """Take one sample: remember it, feed the timeline and the advice,
        redraw. Public so tests (and snapshot runs) can drive the screen
        sample by sample without the timer."""
        self.docs.append(doc)
        self.times.append(float(doc.elapsed_s or 0.0))
        if not self.feed.seekable and len(self.docs) > 2 * KEEP_DOCS:
            del self.docs[1:-KEEP_DOCS]
        self.last = doc
        self.ticks += 1
        self.timeline.add(doc)
        self.advisor.add(doc)
        if self.ticks == 1 and doc.job.backup is not None:
            self.query_one("#chart").border_title = \
                "throughput (bytes/s streamed) · active streams"
        self._render_doc(doc)
        self._log_events(doc)

    def _log_events(self, doc: Sample) -> None:
        """Items started / finished, verdict changes, notes and server
        errors, once each: the story of the run in words (tall screens)."""
        log = self.query_one("#events", EventLog)
        lines: list[Text] = []  # one write a sample: each write is a layout pass
        t_now = float(doc.elapsed_s or 0.0)
        for ev in self.timeline.events[self._logged:]:
            line = Text(f"{fmt.duration(ev.t):>10} ", style="dim")
            line.append(f"{ev.pid:>7} ")
            if ev.what == "start":
                line.append(f"{ev.phase} ", style="cyan")
                line.append(ev.item)
            else:
                line.append("done ", style="green")
                line.append(f"{ev.item} ({fmt.duration(ev.duration or 0)})")
            lines.append(line)
        self._logged = len(self.timeline.events)
        kind = doc.bottleneck.kind
        if kind and kind != self._verdict:
            self._verdict = kind
            lines.append(Text(f"{fmt.duration(t_now):>10}         limit now: {kind}",
                              style="yellow"))
        said = list(doc.notes)
        err = doc.server.error
        if err:
            said.append(f"server: {err}")
        for msg in said:
            if msg not in self._said:
                self._said.add(msg)
                lines.append(Text(f"{fmt.duration(t_now):>10}         {msg}",
                                  style="magenta"))
        if lines:
            log.write(Text("\n").join(lines))

    def _render_doc(self, doc: Sample) -> None:
        self.query_one("#header", JobHeader).doc = doc
        b = doc.bottleneck
        self.query_one("#verdict", VerdictLine).verdict = (str(b.kind or "-"),
                                                           str(b.detail or ""))
        self._show_workers()
        chart = self.query_one("#chart", ThroughputChart)
        chart.jobs = doc.job.jobs
        chart.series = chart_points(self.timeline.series)
        self.query_one("#host", HostPanel).host = doc.host
        spans = self.timeline.spans()
        gantt = self.query_one("#gantt", GanttChart)
        gantt.t_first = self.timeline.t_first or 0.0
        gantt.t_end = self.timeline.t_end
        gantt.idle = self.timeline.idle()
        gantt.phases = self.timeline.phases
        gantt.spans = spans
        self.query_one("#advice", AdviceLine).advice = self.advisor.advice()
        self._show_status()

    def _show_workers(self) -> None:
        table = self.query_one("#workers", WorkersTable)
        last = self.last
        workers = last.workers if last is not None else ()
        # a job with no client process (a logical sync, a remote client)
        # would fill a client column with dashes
        clients = (last is not None and bool(last.job.client_pid)) or \
            any(w.client_pid for w in workers)
        table.show(workers, self.size.width, clients)
        table.border_title = f"workers ({len(workers)}, sort: {table.sort_by})"

    def _show_summary(self, summary: Doc | None, err: str | None) -> None:
        if err is not None:
            self.error = err
        if summary is not None:
            self.summary = summary
            self.end = end = end_summary(summary, self.docs, times=self.times)
            table = self.query_one("#summary", SummaryTable)
            table.show(end, self.size.width)
            table.display = True
            table.border_title = (f"items (longest first) · {end.facts.state} in "
                                  f"{fmt.duration(end.facts.wall_s)}")
            self.query_one("#workers").display = False
        self._show_status()

    def _show_status(self) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        status = self.query_one("#status", StatusLine)
        status.remove_class("-error", "-paused", "-ended")
        server_err = self.last.server.error if self.last is not None else None
        if self.ended:
            status.add_class("-ended")
            t.append(self._end_text(), style="bold")
            t.append(" — press q to quit")
        elif self.paused:
            status.add_class("-paused")
            t.append("⏸ PAUSED", style="bold")
            t.append(" (p resumes)")
        else:
            t.append(f"sampling every {fmt.duration(self.interval)}")
            if self.stretched is not None and self.latency is not None:
                t.append(f" → stretched to {fmt.duration(self.stretched)} (a tick took "
                         f"{fmt.duration(self.latency)})", style="bold yellow")
        if (pos := self.feed.replay_position) is not None:
            t.append(f" · replay {pos[0]}/{pos[1]}")
        lat = self.last.server.latency_ms if self.last is not None else None
        if lat is not None:
            t.append(f" · server {lat:.0f} ms")
        if self.error or server_err:
            status.add_class("-error")
            if self.error:
                t.append(f" · error: {self.error}", style="bold")
            if server_err:
                t.append(f" · server: {server_err}", style="bold")
        notes = self.last.notes if self.last is not None else ()
        if notes and not (self.error or server_err):
            t.append(f" · note: {notes[-1]}", style="italic")
        status.text = t
        header = self.query_one("#header", JobHeader)
        header.label = "PAUSED" if self.paused and not self.ended else ""

    def _end_text(self) -> str:
        o = self.feed.outcome
        if o is None:
            return "end of recording (the job had not ended)"
        reason = str(o.reason or "")
        code = o.exit_code
        extra = f", exit code {code}" if code is not None and "exit code" not in reason else ""
        return f"job {o.state}: {reason}{extra}"

    # ---- actions -------------------------------------------------------

    def action_toggle_pause(self) -> None:
        if self.ended:
            return
        self.paused = not self.paused
        if self.paused and self._timer is not None:
            self._timer.stop()
            self._timer = None
        elif not self.paused and not self._collecting:
            self._schedule(0.0)
        self._show_status()

    def action_slower(self) -> None:
        self._set_interval(next((s for s in INTERVAL_STEPS if s > self.interval + 1e-9),
                                INTERVAL_STEPS[-1]))

    def action_faster(self) -> None:
        self._set_interval(next((s for s in reversed(INTERVAL_STEPS)
                                 if s < self.interval - 1e-9), INTERVAL_STEPS[0]))

    def _set_interval(self, value: float) -> None:
        self.interval = value
        if self._timer is not None and not self.paused:
            self._schedule(value)  # the new cadence applies now, not after the old wait
        self._show_status()

    def action_cycle_sort(self) -> None:
        table = self.query_one("#workers", WorkersTable)
        table.sort_by = SORTS[(SORTS.index(table.sort_by) + 1) % len(SORTS)]
        self._show_workers()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "workers":
            self.action_details()

    def action_details(self) -> None:
        table = self.query_one("#workers", WorkersTable)
        pid = table.highlighted_pid()
        w = self.last.worker(pid) if self.last is not None and pid is not None else None
        if w is None:
            self.notify("no worker highlighted", severity="warning")
            return
        self.push_screen(DetailsScreen(w, self.feed.details))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def action_step_forward(self) -> None:
        self._replay_move(+1)

    def action_step_back(self) -> None:
        self._replay_move(-1)

    def _replay_move(self, delta: int) -> None:
        """Replay only: step through samples (pausing the clock). Back seeks
        the feed and rebuilds the charts from the samples already seen."""
        if not self.feed.seekable or self._collecting:
            return
        if not self.paused:
            self.action_toggle_pause()
        feed = self.feed
        self._collecting = True

        def work() -> None:
            err = None
            doc = None
            try:
                if delta > 0:
                    doc = feed.step()
                else:
                    pos = feed.replay_position
                    doc = feed.seek(max(0, (pos[0] if pos else 1) - 2))
            except Exception as exc:  # noqa: BLE001
                err = f"{type(exc).__name__}: {exc}"
            try:
                self.call_from_thread(self._moved, doc, err, delta)
            except RuntimeError:
                pass

        self.run_worker(work, thread=True, group="tick", exclusive=True, exit_on_error=False)

    def _moved(self, doc: Sample | None, err: str | None, delta: int) -> None:
        self._collecting = False
        self.error = err
        if doc is None:
            self._show_status()
            return
        if delta > 0:
            if doc is not self.last:
                self.ingest(doc)
        else:
            pos = self.feed.replay_position
            keep = max(1, pos[0] if pos else len(self.docs))
            docs = self.docs[:keep]
            self.docs, self.timeline, self.advisor = [], TimelineBuilder(), AdviceTracker()
            self.times = array("d")
            self.ended, self.summary, self.end = False, None, None
            self.query_one("#summary").display = False
            self.query_one("#workers").display = True
            for d in docs:
                self.docs.append(d)
                self.timeline.add(d)
                self.advisor.add(d)
            self._logged = len(self.timeline.events)  # the log already told these
            self.last = docs[-1] if docs else doc
            self._render_doc(self.last)
        self._check_end()
        self._show_status()

    # ---- command palette -----------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume", "Stop or restart sampling (p)",
                            self.action_toggle_pause)
        yield SystemCommand("Sample less often", "Longer interval (+)", self.action_slower)
        yield SystemCommand("Sample more often", "Shorter interval (-)", self.action_faster)
        yield SystemCommand("Sort workers", "Cycle pid, bytes/s, progress, phase (s)",
                            self.action_cycle_sort)
        yield SystemCommand("Worker details", "Query, locks and client of the highlighted "
                            "worker (enter)", self.action_details)
        yield SystemCommand("Toggle dark / light", "Switch the theme (t)",
                            self.action_toggle_theme)
        yield SystemCommand("Help", "List the keys (?)", self.action_help)


def exit_code(feed: Feed) -> int:
    """The headless rule (job_end.outcome_exit_code): still running (quit
    early) 0; the job's own exit code when known; else 0 finished, 1 failed,
    6 ended with an outcome this user cannot see."""
    from ..job_end import outcome_exit_code

    return outcome_exit_code(feed.outcome)


def run_tui(feed: Feed, interval: float, title: str) -> int:
    """Run the TUI until the user quits; the exit code follows exit_code()."""
    PgParMonApp(feed, interval, title).run()
    return exit_code(feed)
