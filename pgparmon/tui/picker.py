"""The job picker: `attach` found several jobs; list them, let the user
choose one, then follow it as `attach --pid PID` would.

The list comes from a `discover()` function (pick.list_jobs in the CLI, a
fake in tests), called again on `r` in a thread worker: the screen never
waits on the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, tzinfo
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.events import Resize
from textual.widgets import DataTable, Footer, Static

from ..exitcodes import ExitCode
from ..pick import FoundJob
from .. import units as fmt

Discover = Callable[[], Sequence[FoundJob]]
COLUMNS = ("kind", "database", "streams", "pid", "started", "running for", "grouping",
           "command")
MIN_COMMAND = 12  # narrower: no command column (the pane below the table has it)


def _grouping(f: FoundJob) -> str:
    return "inferred" if f.grouping.startswith("inferred") else "tree"


def _cells(f: FoundJob, now: float, tz: tzinfo | None) -> list[str]:
    j = f.job
    started, running = "-", "-"
    if f.started:
        at = datetime.fromtimestamp(f.started, tz=tz)
        same_day = at.date() == datetime.fromtimestamp(now, tz=tz).date()
        started = at.strftime("%H:%M:%S" if same_day else "%m-%d %H:%M")
        running = fmt.duration(max(0.0, now - f.started))
    return [j.kind, ", ".join(j.database_list()) or "?", str(f.sessions),
            str(j.client_pid) if j.client_pid else "remote", started, running, _grouping(f),
            " ".join(j.command) or "-"]


class PickerApp(App[int | None]):
    """Returns the chosen job's pid (its client process, or one of its
    backends for a remote client), or None when the user quits."""

    CSS_PATH = "pgparmon.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "choose", "Follow", priority=True),
        Binding("r", "refresh", "Refresh"),
        Binding("q,escape", "quit", "Quit"),
    ]

    def __init__(self, discover: Discover, found: Sequence[FoundJob] | None = None,
                 title: str = "pgparmon attach", *, clock: Callable[[], float] = time.time,
                 tz: tzinfo | None = None) -> None:
        super().__init__()
        self.discover = discover
        self.found: list[FoundJob] = list(found or ())
        self.title = title
        self.clock = clock  # injectable: the snapshot freezes "running for"
        self.tz = tz  # None: local time
        self.loading = False
        self.error: str | None = None
        self.listed_at: float | None = None
        self.refreshes = 0  # discover() calls that returned

    def compose(self) -> ComposeResult:
        yield Static(id="picker-head")
        yield DataTable(id="picker-jobs", cursor_type="row", zebra_stripes=True)
        yield Static(id="picker-command")
        yield Static(id="picker-status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#picker-jobs", DataTable)
        table.border_title = "jobs on this server"
        self.query_one("#picker-command").border_title = "command"
        if self.found:
            self.listed_at = self.clock()
            self._show()
            self._show_status()
        else:
            self.action_refresh()
        table.focus()

    # ---- the list ------------------------------------------------------

    def action_refresh(self) -> None:
        if self.loading:
            return
        self.loading = True
        self._show_status()
        self.run_worker(self._discover_in_thread, thread=True, group="discover",
                        exclusive=True, exit_on_error=False)

    def _discover_in_thread(self) -> None:
        found: list[FoundJob] | None = None
        err: str | None = None
        try:
            found = list(self.discover())
        except Exception as exc:  # noqa: BLE001 - shown, the old list stays
            err = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        try:
            self.call_from_thread(self._discovered, found, err)
        except RuntimeError:
            pass  # the app is closing

    def _discovered(self, found: list[FoundJob] | None, err: str | None) -> None:
        self.loading = False
        self.refreshes += 1
        self.error = err
        if found is not None:
            keep = self.highlighted()  # the cursor stays on the same job
            self.found = found
            self.listed_at = self.clock()
            self._show(keep.pid if keep else None)
        self._show_status()

    def _show(self, keep_pid: int | None = None) -> None:
        table = self.query_one("#picker-jobs", DataTable)
        now = self.listed_at or self.clock()
        rows = [_cells(f, now, self.tz) for f in self.found]
        table.clear(columns=True)
        # the command takes what the other columns leave, if that is at least
        # MIN_COMMAND wide (the pane below shows the highlighted one whole)
        fixed = sum(max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
                    for i, c in enumerate(COLUMNS[:-1]))
        room = self.size.width - fixed - 2 * len(COLUMNS) - 4
        columns = COLUMNS if room >= MIN_COMMAND else COLUMNS[:-1]
        for c in columns:
            table.add_column(c, key=c)
        for i, r in enumerate(rows):
            cells = r[:-1]
            if len(columns) == len(COLUMNS):
                cells.append(r[-1] if len(r[-1]) <= room else r[-1][:room - 1] + "…")
            table.add_row(*cells, key=str(i))
        at = next((i for i, f in enumerate(self.found) if keep_pid and f.pid == keep_pid), 0)
        if self.found:
            table.move_cursor(row=at)
        n = len(self.found)
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append(f"{n} job{'s' if n != 1 else ''} found", style="bold")
        head.append(" · choose one to follow (as attach --pid)" if n else
                    " · none running now")
        if self.listed_at is not None:
            at_s = datetime.fromtimestamp(self.listed_at, tz=self.tz).strftime("%H:%M:%S")
            head.append(f" · listed at {at_s}", style="dim")
        self.query_one("#picker-head", Static).update(head)
        self._show_command()

    def _show_command(self) -> None:
        f = self.highlighted()
        t = Text()
        if f is not None:
            t.append(" ".join(f.job.command) or "(command line not visible)")
            t.append(f"\n{f.job.describe()}", style="dim")
        self.query_one("#picker-command", Static).update(t)

    def on_resize(self, event: Resize) -> None:
        if self.found:  # the command column takes the new width
            keep = self.highlighted()
            self._show(keep.pid if keep else None)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_command()

    def _show_status(self) -> None:
        st = self.query_one("#picker-status", Static)
        st.set_class(bool(self.error), "-error")
        t = Text(no_wrap=True, overflow="ellipsis")
        if self.loading:
            t.append("looking for jobs…", style="bold")
        elif self.error:
            t.append(f"error: {self.error} (r tries again)", style="bold")
        elif not self.found:
            t.append("no job running now: r looks again, q quits")
        else:
            t.append("↑↓ move · enter follows · r refreshes (jobs come and go) · q quits")
        st.update(t)

    def highlighted(self) -> FoundJob | None:
        table = self.query_one("#picker-jobs", DataTable)
        if not self.found or table.row_count == 0:
            return None
        row = table.cursor_row
        return self.found[row] if 0 <= row < len(self.found) else None

    # ---- choosing ------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_choose()  # a click on a row

    def action_choose(self) -> None:
        f = self.highlighted()
        if f is None:
            self.notify("no job to follow: r looks again", severity="warning")
            return
        if f.pid is None:
            self.notify("this job has no pid to follow it by", severity="warning")
            return
        self.exit(f.pid)

    async def action_quit(self) -> None:
        self.exit(None)


def after_pick(chosen: int | None, follow: Callable[[int], int]) -> int:
    """What attach does once the picker closed: follow the chosen pid (the
    `attach --pid` path), or exit 0 when the user quit without choosing."""
    if chosen is None:
        return int(ExitCode.OK)
    return int(follow(chosen))


def run_picker(discover: Discover, follow: Callable[[int], int],
               found: Sequence[FoundJob] | None = None, title: str = "pgparmon attach",
               **run_kw: Any) -> int:
    """Show the picker until the user chooses or quits; then follow(pid)."""
    app = PickerApp(discover, found, title)
    return after_pick(app.run(**run_kw), follow)
