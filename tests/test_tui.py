"""The TUI against sample docs of real jobs (see jobdocs.py), driven with
Textual's pilot, plus SVG snapshots of fixed docs (tests/golden/tui/)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import textual
from jobdocs import JobRun, dump_run, golden, restore_run
from rich.text import Text
from support import in_terminal
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from pgparmon.analyze.timeline import build
from pgparmon.cluster import Cluster
from pgparmon.feed import FeedBase
from pgparmon.jobs.base import Job
from pgparmon.pick import FoundJob
from pgparmon.sample import JobStatus, Sample
from pgparmon.tui import PgParMonApp, exit_code
from pgparmon.tui.app import INTERVAL_STEPS
from pgparmon.tui.draw import bar, gantt, throughput_chart
from pgparmon.tui.widgets.job_header import items as header_items
from pgparmon.tui.picker import PickerApp, after_pick, run_picker
from pgparmon.tui.screens import DetailsScreen, HelpScreen
from pgparmon.tui.widgets import (
    AdviceLine,
    JobHeader,
    StatusLine,
    SummaryTable,
    VerdictLine,
    WorkersTable,
)
from pgparmon import units as fmt
from pgparmon.views.summary import ItemGroup

Doc = dict[str, Any]
typed = Sample.from_json  # the docs of real runs, as the app reads them

# The snapshots under __snapshots__ were taken with this Textual; another
# version draws differently (fonts, borders), which is not a regression.
SNAPSHOT_TEXTUAL = "8.2"


class ListFeed(FeedBase):
    """The feed protocol over a list of recorded docs. hold=True keeps
    returning the last doc (a job that never ends: for key tests); pause_at
    keeps returning that doc until it is set to None (a test reads the
    screen at a sample it chose, however slowly it gets to read)."""

    def __init__(self, docs: list[Doc], summary: Doc | None = None,
                 hold: bool = False, pause_at: int | None = None) -> None:
        self.docs = docs
        self.summary_doc = summary
        self.hold = hold
        self.pause_at = pause_at
        self.i = 0
        self.outcome: Any = None
        self.detail_calls: list[int] = []

    def tick(self) -> Sample:
        at = min(self.i, len(self.docs) - 1)
        if self.pause_at is not None:
            at = self.i = min(at, self.pause_at)
        doc = self.docs[at]
        self.i += 1
        j = doc["job"]
        if j["state"] != "running" and not self.hold:
            self.outcome = SimpleNamespace(state=j["state"], reason=j.get("outcome"),
                                           exit_code=j.get("exit_code"))
        return typed(doc)

    def summary(self) -> Doc:
        assert self.summary_doc is not None
        return self.summary_doc

    def details(self, pid: int) -> Doc:
        self.detail_calls.append(pid)
        w = next(w for w in self.docs[min(self.i, len(self.docs)) - 1]["workers"]
                 if w["pid"] == pid)
        return {"query": w["query"], "locks": [
            {"locktype": "relation", "mode": "AccessShareLock", "granted": True,
             "relation": w["relation"], "blocked_by": None},
            {"locktype": "relation", "mode": "AccessExclusiveLock", "granted": False,
             "relation": "public.other", "blocked_by": [4242]}],
            "client": {"pid": w["client_pid"], "cmdline": ["pg_dump", "-j", "2"],
                       "status": "running", "user": "postgres"}}


@pytest.fixture(scope="module")
def dump(cluster: Cluster, sample_db: str) -> JobRun:
    return dump_run(cluster, sample_db)


@pytest.fixture(scope="module")
def restore(cluster: Cluster, dump_archive: Path) -> JobRun:
    return restore_run(cluster, dump_archive)


def sync(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async pilot test in its own event loop (no asyncio plugin
    needed); functools.wraps keeps the signature pytest reads fixtures from."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))  # type: ignore[arg-type]

    return wrapper


def running(run: JobRun) -> list[Doc]:
    return [d for d in run.samples if d["job"]["state"] == "running"]


async def wait_for(pilot: Pilot[Any], cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.02)


def status_text(app: PgParMonApp) -> str:
    return app.query_one("#status", StatusLine).text.plain


@contextlib.asynccontextmanager
async def drawn(docs: list[Doc], size: tuple[int, int]) -> AsyncIterator[PgParMonApp]:
    """The screen at this size once it has taken in every doc (the last
    one held: the job still runs)."""
    app = PgParMonApp(ListFeed(docs, hold=True), 1.0, "t", autostart=False)
    async with app.run_test(size=size) as pilot:
        for d in docs:
            app.ingest(typed(d))
        await pilot.pause()
        yield app


def header_text(app: PgParMonApp) -> str:
    r = app.query_one("#header", JobHeader).render()
    assert isinstance(r, Text)
    return r.plain


def table_rows(table: Any) -> list[list[str]]:
    return [[c.plain if isinstance(c, Text) else str(c) for c in table.get_row_at(i)]
            for i in range(table.row_count)]


# ---- behaviour --------------------------------------------------------------


@pytest.mark.integration
@sync
async def test_rows_progress_and_end_of_a_real_dump(dump: JobRun) -> None:
    # the screen read at the first sample of two workers copying (the feed
    # waits there: at 0.01 s a sample, a busy machine's test would read a
    # later one, maybe the leader alone writing the TOC), then to the end
    at = next(i for i, d in enumerate(dump.samples)
              if sum(w["phase"] == "copy" for w in d["workers"]) >= 2)
    feed = ListFeed(dump.samples, dump.summary, pause_at=at)
    app = PgParMonApp(feed, 0.01, "t")
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one("#workers", WorkersTable)
        await wait_for(pilot, lambda: app.ticks > at)
        rows = table_rows(table)
        pids = {w["pid"] for w in dump.samples[at]["workers"]}
        assert len(rows) >= 2 and {int(r[0]) for r in rows} <= pids
        assert sum("copy" in r for r in rows) >= 2
        assert "%" in header_text(app) and "pg_dump -j 2" in header_text(app)
        feed.pause_at = None
        # the job ends: the final state and the per-item summary stay on screen
        await wait_for(pilot, lambda: app.summary is not None)
        await pilot.pause()
        assert app.is_running
        assert "job finished" in status_text(app) and "press q" in status_text(app)
        assert "100.0%" in header_text(app)
        summary = app.query_one("#summary", SummaryTable)
        # the end summary's rows: every item, short ones finished together grouped
        assert app.end is not None and summary.display
        assert summary.row_count == len(app.end.rows)
        assert sum(getattr(r, "count", 1) for r in app.end.rows) == len(dump.summary["items"])
        assert table_rows(summary)[0][0] == "public.orders"  # longest first
        spans = app.timeline.spans()
        assert any(s.item == "public.orders" for lst in spans.values() for s in lst)
        await pilot.press("q")
    assert not app.is_running
    assert exit_code(feed) == 0


@pytest.mark.integration
@sync
async def test_a_sample_redraws_only_what_changed(dump: JobRun,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Cost of watching: the next sample of the same workers updates the
    changed cells of the workers table in place (no rebuild), and the lines
    whose text changes every sample (verdict, advice, timeline) ask for no
    layout pass (the whole screen re-rendered) unless their height changes."""
    from textual.widget import Widget

    layouts: list[str] = []
    orig = Widget.refresh

    def counting(self: Widget, *regions: Any, **kw: Any) -> Any:
        if kw.get("layout"):
            layouts.append(type(self).__name__)
        return orig(self, *regions, **kw)

    samples = [d for d in dump.samples if len(d["workers"]) == 2]
    pairs = [(a, b) for a, b in zip(samples, samples[1:], strict=False)
             if [w["pid"] for w in a["workers"]] == [w["pid"] for w in b["workers"]]
             and a["workers"] != b["workers"]]
    assert pairs, "the dump needs two samples of the same two workers"
    app = PgParMonApp(ListFeed(dump.samples, hold=True), 1.0, "t", autostart=False)
    async with app.run_test(size=(160, 50)) as pilot:
        first, second = pairs[0]
        # the verdict's words as before, its figures changed (same length):
        # new text, the same height
        second = copy.deepcopy(second)
        detail = str(first["bottleneck"]["detail"]) + " 12%"
        second["bottleneck"] = {"kind": first["bottleneck"]["kind"],
                                "detail": detail.replace("12%", "34%")}
        first = dict(first, bottleneck={"kind": first["bottleneck"]["kind"],
                                        "detail": detail})
        app.ingest(typed(first))
        await pilot.pause()
        table = app.query_one("#workers", WorkersTable)
        cleared: list[bool] = []
        monkeypatch.setattr(table, "clear", lambda *a, **k: cleared.append(True))
        monkeypatch.setattr(Widget, "refresh", counting)
        app.ingest(typed(second))
        await pilot.pause()
        assert not cleared  # cells updated in place
        assert table_rows(table)[0][0] == str(second["workers"][0]["pid"])
        # what is drawn is the second sample's (cells are cached between
        # samples: a changed cell must be drawn again, the others need not)
        from textual.geometry import Region

        await pilot.pause()
        lines = [strip.text for strip in
                 table.render_lines(Region(0, 0, table.size.width, table.size.height))]
        now = {str(w["pid"]): w for w in second["workers"]}
        before = {str(w["pid"]): w for w in first["workers"]}
        rows = [ln for ln in lines if ln.split() and ln.split()[0] in now]
        assert rows, lines
        for ln in rows:
            w = now[ln.split()[0]]
            assert fmt.rate(w["bytes_per_s"]) in ln, (ln, w)
            old = fmt.rate(before[ln.split()[0]]["bytes_per_s"])
            assert old == fmt.rate(w["bytes_per_s"]) or old not in ln, ln
        assert not {"VerdictLine", "AdviceLine", "GanttChart", "WorkersTable"} & set(layouts), \
            layouts


@sync
async def test_a_verdict_that_wraps_every_other_sample_keeps_its_height() -> None:
    """Cost of watching: a verdict whose detail takes two lines one sample and
    one the next asks for one layout pass (when it first grows), not one a
    sample; its height stays (the body below does not jump) until it has
    been one line for SHRINK_AFTER_S seconds."""
    from textual.app import App, ComposeResult

    class One(App[None]):
        CSS = "#verdict { height: auto; max-height: 2; padding: 0 1; }"

        def compose(self) -> ComposeResult:
            yield VerdictLine(id="verdict")

    short = ("disk-read", "the storage reads at 40 MB/s")
    long = ("disk-read", "the storage reads at 40 MB/s, " + "its queue is full " * 6)
    app = One()
    async with app.run_test(size=(60, 10)) as pilot:
        v = app.query_one(VerdictLine)
        v.verdict = short
        await pilot.pause()
        assert v.size.height == 1
        # nothing is given back while it toggles, however slow the machine:
        # a shorter text arms the timer, a longer one stops it
        v.SHRINK_AFTER_S = 3600.0
        before = v.layouts
        v.verdict = long
        await pilot.pause()
        assert v.size.height == 2 and v.layouts == before + 1
        for i in range(8):
            v.verdict = short if i % 2 == 0 else long
            assert (v._shrink_timer is not None) == (i % 2 == 0), i
            await pilot.pause()
            assert v.size.height == 2, i
        assert v.layouts == before + 1
        # one line for SHRINK_AFTER_S, the text unchanged: the line is given back
        v.SHRINK_AFTER_S = 0.3
        v.verdict = short
        assert v._shrink_timer is not None and v.size.height == 2  # not at once
        await wait_for(pilot, lambda: v.size.height == 1)
        assert v.layouts == before + 2
        # longer than max-height: held at max-height
        v.verdict = ("disk-read", "x " * 200)
        await pilot.pause()
        assert v.size.height == 2


@pytest.mark.integration
@sync
async def test_a_text_panel_repaints_only_its_changed_lines(dump: JobRun) -> None:
    """Cost of watching: a sample whose host figures differ in one line
    marks that line of the host panel dirty, not the panel; an identical
    sample marks none; and what the panel then draws is what a fresh render
    of the whole panel draws."""
    from textual.geometry import Region

    from pgparmon.tui.widgets import HostPanel

    base = next(d for d in running(dump) if (d.get("host") or {}).get("cpu_percent") is not None)
    app = PgParMonApp(ListFeed([base], hold=True), 1.0, "t", autostart=False)
    async with app.run_test(size=(160, 50)) as pilot:
        app.ingest(typed(base))
        await pilot.pause()
        await pilot.pause()
        host = app.query_one("#host", HostPanel)
        whole = Region(0, 0, host.size.width, host.size.height)
        host.render_lines(whole)  # drawn once: the diff starts from these lines
        n0 = host.lines_repainted
        app.ingest(typed(copy.deepcopy(base)))
        await pilot.pause()
        assert host.lines_repainted == n0  # the same figures: nothing to repaint
        changed = copy.deepcopy(base)
        changed["host"]["cpu_percent"] = (base["host"]["cpu_percent"] + 37) % 100
        app.ingest(typed(changed))
        await pilot.pause()
        assert host.lines_repainted == n0 + 1  # the CPU line alone
        drawn = [s.text for s in host.render_lines(whole)]
        assert any(f"CPU {changed['host']['cpu_percent']:.0f}%" in ln for ln in drawn), drawn
        host._stale = True  # a full render from scratch draws the same lines
        assert [s.text for s in host.render_lines(whole)] == drawn


@sync
async def test_text_lines_draw_like_rich_line_by_line() -> None:
    """The text panels render their Text once and split the segments at
    newlines: the same cells and styles as rendering each line by itself
    (cropped, or cut with an ellipsis where the text asks for one; wide
    characters included)."""
    from rich.segment import Segment

    from pgparmon.tui.widgets import StatusLine

    def by_line(w: StatusLine, text: Text) -> list[list[tuple[str, Any]]]:
        width, height = w.size
        base = w.visual_style.rich_style
        out = []
        for line in text.split("\n", allow_blank=True)[:height]:
            if line.cell_len > width:
                line.truncate(width, overflow=line.overflow or text.overflow or "crop")
            segs = Segment.apply_style(line.render(w.app.console), base)
            out.append(Strip(segs).adjust_cell_length(width, base))
        return [[(s.text, s.style) for s in Strip.join([st]).simplify()] for st in out
                if st.text.strip()]

    def ours(w: StatusLine, text: Text) -> list[list[tuple[str, Any]]]:
        return [[(s.text, s.style) for s in st.simplify()] for st in w._text_strips(text)
                if st.text.strip()]

    from textual.strip import Strip

    app = PgParMonApp(ListFeed([{"job": {"state": "running"}}], hold=True), 1.0, "t",
                      autostart=False)
    async with app.run_test(size=(40, 20)) as pilot:
        await pilot.pause()
        w = app.query_one("#status", StatusLine)
        long = "x" * 30 + "表名テーブル" * 3
        for overflow in ("ellipsis", "crop", None):
            t = Text(no_wrap=True, overflow=overflow)
            t.append("short ", style="bold")
            t.append(long, style="cyan")
            t.append("\n")
            t.append("second line", style="dim")
            t.append(" " + long[::-1], style="red")
            assert ours(w, t) == by_line(w, t), overflow


@pytest.mark.integration
@sync
async def test_keys_pause_interval_sort_details_help_quit(dump: JobRun) -> None:
    # samples with two workers copying: the last running sample of a dump may
    # have none (its leader writing the TOC), and the keys below need rows
    busy = [d for d in running(dump)
            if sum(w.get("relation") is not None for w in d["workers"]) >= 2]
    assert len(busy) >= 3, "the recorded dump never had two workers copying"
    feed = ListFeed(busy, dump.summary, hold=True)
    app = PgParMonApp(feed, 0.05, "t")
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one("#workers", WorkersTable)
        await wait_for(pilot, lambda: table.row_count >= 2 and app.ticks >= 3)
        await pilot.press("p")
        assert app.paused and "PAUSED" in status_text(app)
        # a tick in flight when p was pressed still lands: wait for it
        await wait_for(pilot, lambda: not app.collecting)
        n = app.ticks
        await pilot.pause(0.3)
        assert app.ticks == n, "ticking went on while paused"
        await pilot.press("p")
        await wait_for(pilot, lambda: app.ticks > n)
        assert "PAUSED" not in status_text(app)

        # 0.05 s is below the steps: + goes to the first step, then the next;
        # - goes one step down, and the first step is the floor
        await pilot.press("plus")
        assert app.interval == INTERVAL_STEPS[0]
        assert f"every {fmt.duration(INTERVAL_STEPS[0])}" in status_text(app)
        await pilot.press("plus")
        assert app.interval == INTERVAL_STEPS[1]
        assert f"every {fmt.duration(INTERVAL_STEPS[1])}" in status_text(app)
        await pilot.press("minus", "minus")
        assert app.interval == INTERVAL_STEPS[0]
        assert f"every {fmt.duration(INTERVAL_STEPS[0])}" in status_text(app)

        sorts = []
        for _ in range(4):
            await pilot.press("s")
            sorts.append(table.sort_by)
        assert sorts == ["bytes/s", "progress", "phase", "pid"]
        assert "sort: pid" in str(table.border_title)

        # pause: at a 0.1 s interval on a loaded 2-core machine the table
        # would be rebuilt under the key presses below
        await pilot.press("p")
        await wait_for(pilot, lambda: not app.collecting)
        await pilot.pause()
        table.focus()
        table.move_cursor(row=0)
        pid = table.highlighted_pid()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailsScreen))
        await wait_for(pilot, lambda: feed.detail_calls == [pid])
        screen = app.screen
        locks = screen.query_one("#details-locks", DataTable)
        # fetched in a thread, then shown: wait for the rows, not a while
        await wait_for(pilot, lambda: locks.row_count > 0)
        query = screen.query_one("#details-query").render()
        assert "COPY" in str(query)
        assert any("WAITING" in r for r in map(" ".join, table_rows(locks)))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, DetailsScreen))

        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_text = str(app.screen.query_one("#help-text").render())
        assert "pause" in help_text and "details" in help_text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

        dark = app.current_theme.dark
        await pilot.press("t")
        assert app.current_theme.dark != dark
        await pilot.press("q")
    assert not app.is_running
    assert exit_code(feed) == 0  # quit before the end: 0, as `run` says


@pytest.mark.integration
@sync
async def test_command_palette_has_our_commands(dump: JobRun) -> None:
    app = PgParMonApp(ListFeed(running(dump), hold=True), 0.05, "t")
    async with app.run_test(size=(100, 30)) as pilot:
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Pause / resume", "Sort workers", "Worker details", "Help",
                "Toggle dark / light"} <= titles
        from textual.command import CommandList, CommandPalette

        def first_hit() -> str:
            found = app.screen.query(CommandList)
            if not found or found.first().option_count == 0:
                return ""
            return str(found.first().get_option_at_index(0).prompt)

        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"pause")
        # enter once the search has found it (its hits come in the background)
        await wait_for(pilot, lambda: "Pause / resume" in first_hit())
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.paused)


@pytest.mark.integration
@sync
async def test_resize_between_80x24_and_160x50(restore: JobRun) -> None:
    # samples with workers only: the one held at the end has rows (the last
    # running samples of a restore may have none)
    app = PgParMonApp(ListFeed([d for d in running(restore) if d["workers"]], hold=True), 0.02,
                      "t")
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one("#workers", WorkersTable)
        await wait_for(pilot, lambda: table.row_count >= 1 and app.ticks > 5)
        narrow = [str(c.label) for c in table.columns.values()]
        assert "client" not in narrow and "progress" in narrow and "wait" in narrow
        assert app.screen.has_class("-narrow")
        def labels() -> list[str]:
            return [str(c.label) for c in table.columns.values()]

        await pilot.resize_terminal(160, 50)
        await wait_for(pilot, lambda: "client" in labels())
        assert app.screen.has_class("-wide") and app.screen.has_class("-tall")
        assert app.query_one("#events").display
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: "client" not in labels()
                       and app.query_one("#header").outer_size.width == 80)


class FlakyFeed(ListFeed):
    """Raises on every other tick: a dropped connection, a bug."""

    def tick(self) -> Sample:
        self.i += 1
        if self.i % 2 == 0:
            raise RuntimeError("boom: connection to the server was lost")
        return typed(self.docs[min(self.i // 2, len(self.docs) - 1)])


@pytest.mark.integration
@sync
async def test_tick_exceptions_keep_the_app_alive(dump: JobRun) -> None:
    feed = FlakyFeed(running(dump), hold=True)
    app = PgParMonApp(feed, 0.02, "t")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.error is not None)
        assert "boom" in status_text(app)
        assert app.query_one("#status").has_class("-error")
        await wait_for(pilot, lambda: app.error is None and app.ticks >= 2)
        assert "boom" not in status_text(app)  # a good tick clears it
        await wait_for(pilot, lambda: feed.i >= 8)  # and it kept retrying
        await pilot.press("p")
        assert app.paused


@pytest.mark.integration
@sync
async def test_server_error_is_shown_and_screen_stays_responsive(dump: JobRun) -> None:
    doc = copy.deepcopy(running(dump)[5])
    doc["server"]["error"] = "canceling statement due to statement timeout"
    doc["workers"] = []
    feed = ListFeed([*running(dump)[:5], doc], hold=True)
    app = PgParMonApp(feed, 0.02, "t")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: feed.i >= 7)
        assert "server: canceling statement due to statement timeout" in status_text(app)
        assert app.query_one("#status").has_class("-error")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("p")
        assert app.paused


@pytest.mark.integration
@sync
async def test_lock_wait_rows_stand_out(dump: JobRun) -> None:
    doc = copy.deepcopy(running(dump)[6])
    w = doc["workers"][1]
    w.update(phase="lock-wait", wait_event="Lock:relation", blocked_by=[4242, 4243],
             bytes_per_s=None, tuples_per_s=None, progress=None)
    app = PgParMonApp(ListFeed([doc], hold=True), 1.0, "t", autostart=False)
    async with app.run_test(size=(120, 30)) as pilot:
        app.ingest(typed(doc))
        await pilot.pause()
        table = app.query_one("#workers", WorkersTable)
        row = table.get_row(str(w["pid"]))
        wait = row[-1]
        assert "← 4242,4243" in wait.plain and "red" in str(wait.style)
        assert "lock-wait" in row[2].plain and "red" in str(row[0].style)
        await pilot.press("s", "s", "s")  # phase order: lock-wait first
        assert table.sort_by == "phase"
        assert table.get_row_at(0)[0].plain == str(w["pid"])


class SlowFeed(ListFeed):
    def tick(self) -> Sample:
        time.sleep(0.25)
        return super().tick()


@pytest.mark.integration
@sync
async def test_slow_tick_stretches_the_interval(dump: JobRun) -> None:
    app = PgParMonApp(SlowFeed(running(dump), hold=True), 0.1, "t")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.ticks >= 2)
        assert app.stretched is not None and app.stretched > 0.3
        assert "stretched" in status_text(app)


@pytest.mark.integration
@sync
async def test_live_advice_is_honest_early_and_concrete_at_the_end(dump: JobRun) -> None:
    app = PgParMonApp(ListFeed(dump.samples), 1.0, "t", autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        app.ingest(typed(dump.samples[0]))
        app.ingest(typed(dump.samples[1]))
        await pilot.pause()
        adv = app.query_one("#advice", AdviceLine).advice
        assert adv is not None and "not enough data" in adv.headline
        assert adv.next_jobs is None
        for d in dump.samples[2:]:
            app.ingest(typed(d))
        await pilot.pause()
        adv = app.query_one("#advice", AdviceLine).advice
        assert adv is not None and adv.by_streams  # throughput per worker count measured


@pytest.mark.integration
@sync
async def test_replay_feed_in_the_tui(dump: JobRun) -> None:
    from pgparmon.playback import ReplayFeed
    from pgparmon.record import read_recording

    # real time: a quiet machine dumps the sample in ~2 s (8 samples at
    # 0.3 s), and a fast replay would end before the keys below are pressed
    feed = ReplayFeed(read_recording(str(dump.recording)), speed=1.0)
    app = PgParMonApp(feed, 0.0, "replay")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ticks >= 3, timeout=20)
        await pilot.press("p")
        await wait_for(pilot, lambda: not app._collecting)
        pos = feed.position
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: feed.position == pos + 1 and not app._collecting)
        assert "replay" in status_text(app)
        n = len(app.docs)
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: feed.position == pos and not app._collecting,
                       timeout=20)
        assert len(app.docs) == n - 1
        await pilot.press("p")
        await wait_for(pilot, lambda: app.ended, timeout=30)
        await wait_for(pilot, lambda: app.summary is not None)
        assert "job finished" in status_text(app)
    assert exit_code(feed) == 0


@sync
async def test_no_color_keeps_the_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    docs = copy.deepcopy(golden("dump_mid"))
    w = docs[-1]["workers"][0]
    w.update(phase="lock-wait", wait_event="Lock:relation", blocked_by=[4242])
    app = PgParMonApp(ListFeed(docs, hold=True), 1.0, "t", autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        for d in docs:
            app.ingest(typed(d))
        await pilot.pause()
        assert app.no_color  # Textual's own NO_COLOR handling: a monochrome screen
        svg = app.export_screenshot()
        # what colour would say is also said with characters
        for cue in ("⚠", "← 4242", "█", "idle"):
            assert cue in svg.replace("&#160;", " ")


@pytest.mark.integration
def test_live_run_in_a_terminal(cluster: Cluster, sample_db: str, tmp_path: Path) -> None:
    """`pgparmon run` in a real pseudo-terminal: the TUI follows a live
    pg_dump through the real Monitor, shows the end, and q exits with the
    job's code."""
    import sys

    tmp_path.chmod(0o777)
    argv = [sys.executable, "-m", "pgparmon", "run", "--interval", "0.3", "--",
            cluster.client("pg_dump"), "-Fd", "-j", "2", "-f", str(tmp_path / "d"), sample_db]
    sent: list[bytes] = []

    def quit_at_the_end(out: bytes, pid: int) -> bytes | None:
        if not sent and b"press q" in out:
            sent.append(b"q")
            return b"q"
        return None

    out, code = in_terminal(argv, {**cluster.env(), "TERM": "xterm-256color"},
                            quit_at_the_end, size=(40, 120))
    text = out.decode("utf-8", "replace")
    assert sent, text[-2000:]
    assert code == 0
    assert "job finished" in text and "timeline" in text


# ---- drawing ----------------------------------------------------------------


@sync
async def test_header_says_how_a_copy_job_was_grouped_and_measured() -> None:
    """A COPY job has no -j and no format; the header shows what its sample
    gives instead: how its sessions were grouped and where progress comes
    from. The stream rows show their own input file's progress."""
    docs = golden("copy_mid")
    async with drawn(docs, (120, 36)) as app:
        head = header_text(app)
        assert head.startswith("copy  load  process tree  progress: client input files")
        assert "-j" not in head and "ETA " in head and "ETA ?" not in head
        rows = table_rows(app.query_one("#workers", WorkersTable))
        assert [r[3] for r in rows] == ["public.customers", "public.orders"]
        assert all("%" in " ".join(r) and "100%" not in " ".join(r) for r in rows)
    inferred = copy.deepcopy(docs)
    inferred[-1]["job"].update(grouping="inferred: application_name, client address, user",
                               progress_basis="unknown", databases=["load", "other"])
    async with drawn(inferred, (120, 36)) as app:
        assert header_text(app).startswith("copy  load, other  inferred  progress: unknown ")
    # a dump's target comes first: its grouping only where there is room left
    dump = copy.deepcopy(golden("dump_mid"))
    dump[-1]["job"]["grouping"] = "process tree"
    for size, grouped in (((80, 24), False), ((160, 50), True)):
        async with drawn(dump, size) as app:
            head = header_text(app)
            assert "/tmp/tmpy3c97bgj/x" in head and ("process tree" in head) == grouped


@sync
async def test_header_names_the_step_of_a_restore_in_steps() -> None:
    """A restore in steps (its sample's `job.step`): the header says which
    step runs now; a restore in one run says no step."""
    docs = golden("restore_index")
    async with drawn(docs, (120, 36)) as app:
        assert "step" not in header_text(app)
    steps = copy.deepcopy(docs)
    steps[-1]["job"]["step"] = 3
    async with drawn(steps, (120, 36)) as app:
        assert header_text(app).startswith(f"pg_restore -j {docs[-1]['job']['jobs']}  "
                                           f"{docs[-1]['job']['database']}  step 3")


def test_bars_and_charts_fit_their_width() -> None:
    assert bar(0.5, 10).cell_len == 10 and bar(None, 7).plain == "·" * 7
    assert bar(1.2, 4).plain == "████" and bar(-1, 4).plain == "░░░░"
    docs = golden("dump_mid")
    tl = build(map(typed, docs))
    chart = throughput_chart(tl.series, 60, 6, 2)
    lines = chart.plain.split("\n")
    assert len(lines) == 6 and all(len(ln) <= 60 for ln in lines)
    assert "2" in lines[-2]  # the active-workers row under the rates
    g = gantt(tl.spans(), tl.t_end, 80, idle={}).plain.split("\n")
    assert all(len(ln) <= 80 for ln in g)
    assert any("orders" in ln for ln in g)


@sync
async def test_header_of_a_backup_says_cluster_phase_and_estimate() -> None:
    """A base backup has no database: the header names the whole cluster,
    the server's phase and that its total is the server's estimate; its two
    streams (the data files, the WAL) are rows of their own."""
    docs = golden("backup_mid")
    for d in docs:  # a short target: room for the phase and the progress basis
        d["job"]["target"] = "/backup/base"
        d["job"]["progress_basis"] = "server's estimate (pg_stat_progress_basebackup)"
    async with drawn(docs, (200, 36)) as app:
        head = header_text(app)
        assert head.startswith("pg_basebackup  whole cluster"), head
        assert "phase: streaming database files" in head
        assert "progress: server's estimate" in head and "ETA ?" not in head
        rows = table_rows(app.query_one("#workers", WorkersTable))
        assert sorted(r[2] for r in rows) == ["backup", "wal"], rows


@sync
async def test_a_host_only_restore_says_so_and_shows_its_processes() -> None:
    """A pgBackRest restore (cut from a real one, the server down): the
    header says there is no server, its phase and its progress; each local
    process is a row with the file it writes."""
    docs = golden("pbr_restore_mid")
    async with drawn(docs, (200, 36)) as app:
        head = header_text(app)
        assert head.startswith("pgbackrest-restore -j 2  whole cluster · host only, no server")
        assert "phase: restoring files" in head and "rows/s" not in head
        assert f"{docs[-1]['job']['progress']:.1%}" in head and "ETA ?" not in head
        rows = table_rows(app.query_one("#workers", WorkersTable))
        assert rows and all(r[2] == "restore" for r in rows), rows
        assert any("base/" in " ".join(r) for r in rows), rows


@sync
async def test_a_logical_sync_shows_its_tables_by_state_and_no_client() -> None:
    """A real subscription's initial sync mid-run (tests/docs_images.py
    sync): the header names the subscription and counts the tables waiting,
    copying and ready (not only those done); the rows are its two sync
    workers, with no client column (the server runs the sync itself). The
    same reading on the publisher's side leaves out the states it cannot
    know (null), and a job without table states keeps its items done."""
    docs = golden("sync_mid")
    for size, states in (((120, 36), "tables 2 waiting · 2 copying · 2 ready  "),
                         ((80, 24), "ETA 14.4 s  2 waiting · 2 copying · 2 ready  125.4 kB/s")):
        async with drawn(docs, size) as app:
            head = header_text(app)
            assert head.startswith("logical_sync -j 2  shop  subscription shop_sub"), head
            line2 = head.split("\n")[1]
            assert states in line2 and "catching" not in line2, line2
            assert Text(line2).cell_len <= app.query_one("#header", JobHeader).content_size.width
            table = app.query_one("#workers", WorkersTable)
            labels = [str(c.label) for c in table.columns.values()]
            assert "client" not in labels and labels[:2] == ["pid", "phase"], labels
            rows = table_rows(table)
            assert sorted(r[2].removeprefix("public.") for r in rows) == ["order_items",
                                                                          "orders"]
            assert all(r[1] == "copy" for r in rows), rows
    job = docs[-1]["job"]
    assert header_items(JobStatus.from_json(dict(
        job, tables={"waiting": None, "copying": 1, "catching_up": None, "ready": None,
                     "sent": 3})))[0] == "tables 1 copying · 3 sent"
    assert header_items(JobStatus.from_json(dict(job, tables=None))) == ["items 2/6"]
    # a job with a client keeps its client column
    cp = golden("copy_mid")
    async with drawn(cp, (120, 36)) as app:
        table = app.query_one("#workers", WorkersTable)
        assert "client" in [str(c.label) for c in table.columns.values()]


# ---- snapshots ----------------------------------------------------------------


def _snapshot_app(name: str) -> tuple[PgParMonApp, Callable[[Pilot[Any]], Any]]:
    docs = golden(name)
    # no timer and a frozen clock: the screen depends on the docs alone
    app = PgParMonApp(ListFeed(docs, hold=True), 0.3, f"pgparmon {name}", autostart=False,
                      clock=lambda: 0.0)

    async def feed_all(pilot: Pilot[Any]) -> None:
        for d in docs:
            app.ingest(typed(d))
        await pilot.pause()

    return app, feed_all


def _end_app(name: str) -> tuple[PgParMonApp, Callable[[Pilot[Any]], Any]]:
    """The end screen of a finished job: its samples (tests/golden/tui/NAME:
    the samples, then the summary), then the summary the feed gives once it
    has ended."""
    docs = golden(name)
    samples, summary = docs[:-1], docs[-1]
    assert summary["schema"] == "pgparmon.summary/1"
    feed = ListFeed(samples, summary)
    app = PgParMonApp(feed, 1.0, f"pgparmon {name}", autostart=False, clock=lambda: 0.0)

    async def feed_all(pilot: Pilot[Any]) -> None:
        for d in samples:
            app.ingest(typed(d))
        j = samples[-1]["job"]
        feed.outcome = SimpleNamespace(state=j["state"], reason=j.get("outcome"),
                                       exit_code=j.get("exit_code"))
        app._check_end()
        await wait_for(pilot, lambda: app.end is not None)
        # the table's rows reach the screen at the next layout pass
        table = app.query_one("#summary", SummaryTable)
        await wait_for(pilot, lambda: table.size.height > 2)
        await pilot.pause()

    return app, feed_all


needs_snapshot_textual = pytest.mark.skipif(
    not textual.__version__.startswith(SNAPSHOT_TEXTUAL + "."),
    reason=f"snapshots were taken with Textual {SNAPSHOT_TEXTUAL}.x, this is "
           f"{textual.__version__}: check the screens and run with --snapshot-update")


@needs_snapshot_textual
@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
@pytest.mark.parametrize("name", ["dump_mid", "restore_index"])
def test_snapshot(snap_compare: Any, name: str, size: tuple[int, int]) -> None:
    app, run_before = _snapshot_app(name)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@needs_snapshot_textual
def test_snapshot_backup(snap_compare: Any) -> None:
    """A real pg_basebackup (throttled, fast checkpoint) mid-stream: the
    same screen as docs/img/tui-backup-120x36.svg (tests/docs_images.py)."""
    app, run_before = _snapshot_app("backup_mid")
    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


@needs_snapshot_textual
def test_snapshot_copy(snap_compare: Any) -> None:
    """A real COPY load (two psql \\copy streams) mid-run: the same screen
    as docs/img/tui-copy-120x36.svg (tests/docs_images.py makes both)."""
    app, run_before = _snapshot_app("copy_mid")
    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


@needs_snapshot_textual
def test_snapshot_sync(snap_compare: Any) -> None:
    """A real subscription's initial sync (two sync workers, six tables)
    mid-run: the same screen as docs/img/tui-sync-120x36.svg
    (tests/docs_images.py sync makes both)."""
    app, run_before = _snapshot_app("sync_mid")
    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


@needs_snapshot_textual
@pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=["80x24", "120x36"])
@pytest.mark.parametrize("name", ["dump_end", "restore_end"])
def test_snapshot_end(snap_compare: Any, name: str, size: tuple[int, int]) -> None:
    """The end screens of the demo's real dump and restore (pg_dump -Fd -j 4,
    pg_restore -j 4, a sample a second: tests/docs_images.py end)."""
    app, run_before = _end_app(name)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", ["dump_end", "restore_end"])
@sync
async def test_the_end_table_keeps_names_whole_and_says_what_it_measured(
        name: str, width: int) -> None:
    """The demo's end screens: every name on one line, no "0 ms" for an
    item seen at one sample or none (its duration is "< 1.0 s"), short
    items of a kind seen done at the same sample grouped (never one of
    them alone beside the group), an index or constraint with its table."""
    app, feed_all = _end_app(name)
    async with app.run_test(size=(width, 36)) as pilot:
        await feed_all(pilot)
        end = app.end
        assert end is not None and end.interval is not None
        rows = table_rows(app.query_one("#summary", SummaryTable))
        assert len(rows) == len(end.rows)
        short = f"< {fmt.about(end.interval)}"
        for cells, r in zip(rows, end.rows, strict=True):
            assert "\n" not in cells[0], cells  # not folded
            assert cells[0] == r.label(width < 100)
            assert "0 ms" not in cells
            if r.state == "done" and (isinstance(r, ItemGroup) or r.duration_s < end.interval):
                assert short in cells, cells
            if r.kind in ("index", "constraint", "fk") and not isinstance(r, ItemGroup):
                table = r.table.removeprefix("public.") if width < 100 else r.table
                assert cells[0].endswith(f" on {table}"), cells
        # grouped consistently: no two short items of a kind seen done at the
        # same sample apart
        windows = [(r.kind, r.by_s) for r in end.rows if isinstance(r, ItemGroup)]
        assert len(windows) == len(set(windows))
        lone = [r for r in end.rows if not isinstance(r, ItemGroup) and r.state == "done"
                and r.start_s is not None and (r.duration_s or 0) < end.interval]
        ends = [(r.kind, round(r.start_s + (r.duration_s or 0), 1)) for r in lone]
        assert len(ends) == len(set(ends)), ends
        assert not set(ends) & {(k, round(t, 1)) for k, t in windows}, ends
        assert any(isinstance(r, ItemGroup) for r in end.rows)


@pytest.mark.integration
def test_hangup_ends_the_tui_and_keeps_the_recording(cluster: Cluster, sample_db: str,
                                                     tmp_path: Path) -> None:
    """The SSH session goes away (SIGHUP) while the TUI records a live dump:
    the app ends, exit 129, and the recording is complete and readable."""
    import os
    import signal
    import sys

    from pgparmon.record import read_recording

    tmp_path.chmod(0o777)
    rec = tmp_path / "hup.pgparmon.gz"
    argv = [sys.executable, "-m", "pgparmon", "run", "--interval", "0.3", "--record",
            str(rec), "--", cluster.client("pg_dump"), "-Fd", "-j", "2", "-Z", "9", "-f",
            str(tmp_path / "d"), sample_db]
    hung: list[int] = []

    def hang_up(out: bytes, pid: int) -> None:
        if not hung and out.count(b"workers") >= 2:
            os.kill(pid, signal.SIGHUP)
            hung.append(pid)

    out, code = in_terminal(argv, {**cluster.env(), "TERM": "xterm-256color"}, hang_up,
                            timeout=90)
    assert hung, out.decode("utf-8", "replace")[-2000:]
    assert code == 128 + signal.SIGHUP
    r = read_recording(str(rec))
    assert not r.truncated and r.samples and r.summary is not None


# ---- the job picker (attach found several jobs) -------------------------------

PICK_NOW = 1_764_000_000.0  # 2025-11-24 16:00:00 UTC: the picker's frozen clock


def picker_jobs() -> list[FoundJob]:
    """Three jobs as discovery finds them: a local dump and a local restore
    (process trees), and a COPY load from another host (inferred)."""
    from pgparmon.jobs.copy import INFERRED
    from pgparmon.redact import redact_argv

    dump = Job(kind="pg_dump", database="sales", client_pid=41210, jobs=4, format="directory",
               target="/backups/sales.dir",
               command=tuple(redact_argv(["pg_dump", "-Fd", "-j", "4", "-f",
                                          "/backups/sales.dir",
                                          "dbname=sales password=s3cr3t-pass"])),
               xmin="81234", pid_hint=frozenset({5101, 5102, 5103, 5104, 5105}))
    restore = Job(kind="pg_restore", database="reporting", client_pid=41388, jobs=2,
                  format="custom", target="/backups/reporting.dump",
                  command=("pg_restore", "-j", "2", "-d", "reporting",
                           "/backups/reporting.dump"),
                  pid_hint=frozenset({5201, 5202, 5203}))
    load = Job(kind="copy", database="events", databases=("events",), jobs=3,
               usename="etl", client_addr="10.0.4.17", app_name="loader",
               relation="public.clicks", pid_hint=frozenset({9103, 9101, 9102}),
               grouping=INFERRED)
    return [FoundJob(dump, 5, PICK_NOW - 754), FoundJob(restore, 3, PICK_NOW - 130),
            FoundJob(load, 3, PICK_NOW - 42)]


class FakeDiscover:
    """discover() for the picker: each call returns the next list (the last
    one again when they run out); an Exception in the lists is raised."""

    def __init__(self, *lists: Any) -> None:
        self.lists = list(lists)
        self.calls = 0

    def __call__(self) -> list[FoundJob]:
        item = self.lists[min(self.calls, len(self.lists) - 1)]
        self.calls += 1
        if isinstance(item, Exception):
            raise item
        return list(item)


def _picker(discover: Any, found: Any = None) -> PickerApp:
    return PickerApp(discover, found, "pgparmon attach: several jobs", clock=lambda: PICK_NOW,
                     tz=UTC)


@sync
async def test_picker_lists_refreshes_and_follows_the_chosen_pid() -> None:
    jobs = picker_jobs()
    # the second look: the dump has ended, a new one started
    later = [jobs[1], jobs[2],
             FoundJob(dataclasses.replace(jobs[0].job, client_pid=42001,
                                          pid_hint=frozenset({5301})), 1, PICK_NOW - 3)]
    discover = FakeDiscover(jobs, later, RuntimeError("server closed the connection"))
    app = _picker(discover)
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.query_one("#picker-jobs", DataTable)
        await wait_for(pilot, lambda: app.refreshes == 1)  # discovered in a thread at start
        rows = table_rows(table)
        assert [r[0] for r in rows] == ["pg_dump", "pg_restore", "copy"]
        assert rows[0][1:7] == ["sales", "5", "41210", "15:47:26", "12 min 34 s", "tree"]
        assert rows[1][3] == "41388" and rows[1][5] == "2 min 10 s"
        assert rows[2][1:4] == ["events", "3", "remote"] and rows[2][6] == "inferred"
        assert "pg_dump -Fd -j 4" in rows[0][7]
        assert all("s3cr3t" not in c for r in rows for c in r)  # redacted
        head = app.query_one("#picker-head", Static).render()
        assert "3 jobs found" in str(head)
        # arrows move; the pane below shows the highlighted job's whole command
        await pilot.press("down")
        assert app.highlighted() is jobs[1]
        assert "/backups/reporting.dump" in str(app.query_one("#picker-command",
                                                              Static).render())
        await pilot.press("down", "down", "up")  # the last row stops the cursor
        assert app.highlighted() is jobs[1]
        # r: a new list; the cursor stays on the same job
        await pilot.press("r")
        await wait_for(pilot, lambda: app.refreshes == 2)
        assert discover.calls == 2
        rows = table_rows(table)
        assert [r[3] for r in rows] == ["41388", "remote", "42001"]
        assert app.highlighted() is later[0]
        # a failed refresh keeps the list and says why
        await pilot.press("r")
        await wait_for(pilot, lambda: app.refreshes == 3)
        assert table.row_count == 3
        status = app.query_one("#picker-status", Static)
        assert status.has_class("-error") and "server closed" in str(status.render())
        await pilot.press("enter")
    assert app.return_value == 41388
    followed: list[int] = []
    assert after_pick(app.return_value, lambda pid: followed.append(pid) or 7) == 7
    assert followed == [41388]  # the attach --pid path, with the chosen pid


@sync
async def test_picker_quits_and_follows_remote_jobs_by_a_backend() -> None:
    jobs = picker_jobs()
    for key in ("q", "escape"):
        app = _picker(FakeDiscover(jobs), jobs)
        async with app.run_test(size=(100, 30)) as pilot:
            assert app.query_one("#picker-jobs", DataTable).row_count == 3
            await pilot.press(key)
        assert app.return_value is None
        assert after_pick(app.return_value, lambda pid: pytest.fail("followed")) == 0
    # a remote client's job: followed by one of its backends (attach --pid takes it);
    # at 80 columns the command column gives way (the pane below shows it)
    app = _picker(FakeDiscover(jobs), jobs)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one("#picker-jobs", DataTable)
        assert [str(c.label) for c in table.columns.values()][-1] == "grouping"
        assert table.virtual_size.width <= 78
        await pilot.press("down", "down")
        assert "(command line not visible)" in str(app.query_one("#picker-command",
                                                                 Static).render())
        await pilot.press("enter")
    assert app.return_value == 9101
    # nothing running any more: enter does nothing, r looks again
    discover = FakeDiscover([], jobs[:1])
    app = _picker(discover)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.refreshes == 1)
        assert "no job running now" in str(app.query_one("#picker-status", Static).render())
        await pilot.press("enter")
        assert app.is_running
        await pilot.press("r")
        await wait_for(pilot, lambda: app.refreshes == 2)
        await pilot.press("enter")
    assert app.return_value == 41210


def test_run_picker_follows_the_choice() -> None:
    """run_picker end to end (headless): the picker's choice goes to follow()."""
    jobs = picker_jobs()
    followed: list[int] = []

    async def choose_second(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        await pilot.press("down", "enter")

    code = run_picker(FakeDiscover(jobs), lambda pid: followed.append(pid) or 0, jobs,
                      headless=True, auto_pilot=choose_second)
    assert (code, followed) == (0, [41388])


@needs_snapshot_textual
def test_picker_snapshot(snap_compare: Any) -> None:
    jobs = picker_jobs()
    assert snap_compare(_picker(FakeDiscover(jobs), jobs), terminal_size=(100, 30))


def test_picker_sessions_start_and_json_of_found_jobs() -> None:
    """pick.found_jobs: each session counts for one job (the linked ones
    first, then each driver's grouping rule; parallel workers never), the
    start is the first session's for a remote client; jobs_document is the
    pgparmon.jobs/1 object attach --json prints."""
    from pgparmon.pick import SCHEMA, found_jobs, jobs_document
    from pgparmon.snapshot import Backend, DbSample

    def b(pid: int, xmin: str | None, start: float, app: str = "pg_dump",
          kind: str = "client backend", query: str = "COPY public.t TO stdout") -> Backend:
        return Backend(pid=pid, datname="sales", usename="u", application_name=app,
                       client_addr=None, client_port=-1, backend_start=start, xact_start=None,
                       query_start=start, state="active", wait_event_type=None,
                       wait_event=None, backend_type=kind, backend_xmin=xmin,
                       leader_pid=11 if kind == "parallel worker" else None, query=query)

    db = DbSample(server_ts=PICK_NOW, backends=(
        b(11, "100", PICK_NOW - 60), b(12, "100", PICK_NOW - 59), b(13, "100", PICK_NOW - 59),
        b(14, "100", PICK_NOW - 30, kind="parallel worker"),
        b(21, "200", PICK_NOW - 9), b(22, "200", PICK_NOW - 8),
        b(31, None, PICK_NOW - 5, app="psql", query="select 1")))
    one = Job(kind="pg_dump", database="sales", xmin="100")  # no link: grouped by xmin
    two = Job(kind="pg_dump", database="sales", xmin="200", pid_hint=frozenset({22, 21}))
    found = found_jobs([one, two], db)
    assert [(f.sessions, f.backends, f.started, f.pid) for f in found] == [
        (3, (11, 12, 13), PICK_NOW - 60, 11), (2, (21, 22), PICK_NOW - 9, 21)]
    assert [f.grouping for f in found] == ["inferred: application_name, database"] * 2

    doc = jobs_document(picker_jobs(), PICK_NOW)
    assert doc["schema"] == SCHEMA == "pgparmon.jobs/1"
    dump, restore, load = doc["jobs"]
    assert dump == {
        "kind": "pg_dump", "command": ["pg_dump", "-Fd", "-j", "4", "-f", "/backups/sales.dir",
                                       "dbname=sales password=********"],
        "database": "sales", "databases": ["sales"], "jobs": 4, "sessions": 5,
        "client_pid": 41210, "pid": 41210, "started": "2025-11-24T15:47:26+00:00",
        "running_s": 754.0, "grouping": "process tree", "target": "/backups/sales.dir",
        "relation": None,
        "description": "pg_dump -j 4 /backups/sales.dir on database sales (pid 41210)"}
    assert restore["pid"] == 41388 and restore["running_s"] == 130.0
    assert (load["client_pid"], load["pid"], load["command"]) == (None, 9101, [])
    assert load["grouping"] == "inferred: application_name, client address, user"


def test_the_chart_gets_a_bounded_series_on_a_long_run() -> None:
    """A day at one sample a second: the chart is handed at most
    CHART_POINTS (+1) evenly spaced points, the first and the last in, not
    the whole day copied every sample."""
    from pgparmon.analyze.timeline import SeriesPoint
    from pgparmon.tui.app import CHART_POINTS, chart_points

    day = [SeriesPoint(float(t), 1e6, 1e3, 2, 2, None, None, {}, None) for t in range(86_400)]
    pts = chart_points(day)
    assert len(pts) <= CHART_POINTS + 1
    assert pts[0].t == 0.0 and pts[-1].t == 86_399.0
    gaps = {b.t - a.t for a, b in zip(pts, pts[1:-1], strict=False)}
    assert gaps == {43.0}  # every 43rd second: evenly spaced
    short = day[:100]
    assert chart_points(short) == tuple(short)


@sync
async def test_a_live_tui_keeps_a_bounded_window_of_samples() -> None:
    """A live run of a day must not hold every sample: the TUI keeps the
    first and the last KEEP_DOCS to 2 x KEEP_DOCS, every sample's time apart,
    and the end summary still knows the run's sampling interval."""
    from pgparmon.tui.app import KEEP_DOCS

    base = golden("dump_mid")[-1]
    n = 2 * KEEP_DOCS + 100
    docs = [dict(base, elapsed_s=float(i)) for i in range(n)]
    app = PgParMonApp(ListFeed(docs, hold=True), 1.0, "t", autostart=False)
    samples = [typed(d) for d in docs]
    async with app.run_test(size=(120, 40)) as pilot:
        for d in samples:
            app.ingest(d)
        await pilot.pause()
        assert len(app.docs) <= 2 * KEEP_DOCS and app.docs[0] is samples[0]
        assert app.docs[-1] is samples[-1] and len(app.times) == n
        app._show_summary({"schema": "pgparmon.summary/1", "state": "finished",
                           "wall_s": float(n - 1), "items": []}, None)
        assert app.end is not None and app.end.interval == 1.0
