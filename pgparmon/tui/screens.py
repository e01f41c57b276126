"""Modal screens: one worker's details, and the keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from .. import units as fmt
from ..sample import WorkerRow

KEYS: tuple[tuple[str, str], ...] = (
    ("q", "quit (when the job has ended the final state stays until q)"),
    ("p", "pause / resume sampling"),
    ("+  -", "sample less / more often (a slow tick stretches the interval by itself)"),
    ("s", "cycle the workers table's sort: pid, bytes/s, progress, phase"),
    ("enter", "details of the highlighted worker: full query, locks, client process"),
    ("t", "dark / light theme"),
    ("[  ]", "replay: one sample back / forward (pauses)"),
    ("?", "this help"),
    ("ctrl+p", "command palette (all of the above by name)"),
    ("escape", "close a dialog"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        t = Text()
        t.append("pgparmon keys\n\n", style="bold")
        for key, what in KEYS:
            t.append(f"{key:>8}  ", style="bold cyan")
            t.append(f"{what}\n")
        t.append("\nWorkers in lock-wait are shown in red with ← and the pids that block "
                 "them.\nThe chart's lower row is the number of active workers; the "
                 "timeline shows\neach worker's items over the run (dots: idle).", style="dim")
        with Vertical(id="help-box"):
            yield Static(t, id="help-text")

    async def action_dismiss(self, result: Any = None) -> None:
        self.dismiss(None)


class DetailsScreen(ModalScreen[None]):
    """The highlighted worker: what the sample says at once, then the
    locks and client process from feed.details() (fetched in a thread: it
    may take a server round trip)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, worker: WorkerRow,
                 fetch: Callable[[int], Mapping[str, Any] | None] | None) -> None:
        super().__init__()
        self.worker = worker
        self.fetch = fetch

    def compose(self) -> ComposeResult:
        w = self.worker
        head = Text()
        head.append(f"worker {w.pid}", style="bold")
        head.append(f"  client {w.client_pid or '-'}  phase {w.phase}  "
                    f"item {w.item or w.relation or '-'}\n")
        head.append(f"wait {w.wait_event or 'CPU'}")
        if w.blocked_by:
            head.append(f"  blocked by {', '.join(map(str, w.blocked_by))}",
                        style="bold red")
        head.append(f"  state {w.state or '-'}  "
                    f"done {fmt.size(w.bytes_done)}")
        with Vertical(id="details-box"):
            yield Static(head, id="details-head")
            yield Static(Text("query", style="bold"))
            with VerticalScroll(id="details-query-box"):
                yield Static(Text(str(w.query or "(no query text)")),
                             id="details-query")
            yield Static(Text("locks", style="bold"))
            yield DataTable(id="details-locks", show_cursor=False)
            yield Static(Text("loading details…", style="dim"), id="details-client")

    def on_mount(self) -> None:
        table = self.query_one("#details-locks", DataTable)
        for col in ("locktype", "mode", "granted", "relation", "blocked by"):
            table.add_column(col)
        if self.fetch is None:
            self._show_client(Text("this feed gives no lock or client details", style="dim"))
            return
        fetch, pid = self.fetch, int(self.worker.pid)

        def work() -> None:
            try:
                det: Mapping[str, Any] | None = fetch(pid)
                err = None
            except Exception as exc:  # noqa: BLE001 - shown, never fatal
                det, err = None, f"{type(exc).__name__}: {exc}"
            self.app.call_from_thread(self._show, det, err)

        self.run_worker(work, thread=True, group="details", exclusive=True)

    def _show(self, det: Mapping[str, Any] | None, err: str | None) -> None:
        if err is None and det is None:
            self._show_client(Text("this feed gives no lock or client details", style="dim"))
            return
        if err is not None or det is None:
            self._show_client(Text(f"details unavailable: {err}", style="red"))
            return
        if det.get("query"):
            self.query_one("#details-query", Static).update(Text(str(det["query"])))
        table = self.query_one("#details-locks", DataTable)
        for lk in det.get("locks") or ():
            granted = bool(lk.get("granted"))
            style = "" if granted else "bold red"
            table.add_row(Text(str(lk.get("locktype") or ""), style=style),
                          Text(str(lk.get("mode") or ""), style=style),
                          Text("held" if granted else "WAITING", style=style),
                          Text(str(lk.get("relation") or "-"), style=style),
                          Text(", ".join(map(str, lk.get("blocked_by") or ())) or "-",
                               style=style))
        c = det.get("client") or {}
        t = Text()
        if det.get("error"):
            t.append(f"{det['error']}\n", style="yellow")
        t.append("client process ", style="bold")
        if c:
            t.append(f"{c.get('pid') or '-'} ({c.get('status') or '?'}, user "
                     f"{c.get('user') or '?'})\n")
            cmd = c.get("cmdline")
            t.append(" ".join(cmd) if isinstance(cmd, list) else str(cmd or "-"), style="dim")
        else:
            t.append("not found on this host", style="dim")
        self._show_client(t)

    def _show_client(self, t: Text) -> None:
        self.query_one("#details-client", Static).update(t)

    async def action_dismiss(self, result: Any = None) -> None:
        self.dismiss(None)
