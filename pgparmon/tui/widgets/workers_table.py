"""The TUI's WorkersTable widget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from ... import units as fmt
from ...jobs.registry import phase_of
from ...sample import WorkerRow
from .. import draw


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
        self._cols_for: tuple[int, bool] | None = None  # the columns' width and client
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

    def _columns(self, width: int, clients: bool = True) -> dict[str, int]:
        """Column widths for this screen width. Cells carry their own one
        space gap (cell_padding 0): DataTable's two-cell padding per column
        would not leave an 80-column screen room for the item name. Below
        100 columns the client pid moves to the details dialog only; a job
        with no client process (a logical sync, a remote client) has no
        client column."""
        widths = {"pid": 8, "client": 8, "phase": 11, "bps": 10, "tps": 7,
                  "prog": 11 if width < 120 else 24}
        if width < 100 or not clients:
            del widths["client"]
        rest = max(22, width - sum(widths.values()) - SCROLLBARS)
        widths["item"] = min(48, max(12, rest * 3 // 5))
        widths["wait"] = max(9, rest - widths["item"])
        if self._cols_for != (width, clients):
            self._relaid()
            self.clear(columns=True)
            for key, label in (("pid", "pid"), ("client", "client"), ("phase", "phase"),
                               ("item", "table / item"), ("bps", "bytes/s"),
                               ("tps", "rows/s"), ("prog", "progress"), ("wait", "wait")):
                if key in widths:
                    self.add_column(label, width=widths[key], key=key)
            self._cols_for = (width, clients)
        return widths

    def highlighted_pid(self) -> int | None:
        if self.row_count == 0:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:  # noqa: BLE001 - an empty or shrinking table has no cursor cell
            return None
        return int(key.value) if key.value is not None else None

    def show(self, workers: Sequence[WorkerRow], width: int,
             clients: bool = True) -> None:
        """The workers as rows. When the same workers come in the same order
        (most samples), only the cells whose text changed are updated: a
        rebuilt table re-measures and redraws every row. clients: whether
        the job has a client process (else no client column)."""
        cols_for = self._cols_for
        widths = self._columns(width, clients)
        rows = self._row_cells(workers, widths, width < 100)
        keys = [k for k, _ in rows]
        shown = self._shown
        if cols_for == self._cols_for and keys == list(shown) and \
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

    def _row_cells(self, workers: Sequence[WorkerRow], widths: Mapping[str, int],
                   narrow: bool) -> list[tuple[str, list[Any]]]:
        out: list[tuple[str, list[Any]]] = []
        for w in sorted(workers, key=_sort_key(self.sort_by)):
            lock = w.phase == "lock-wait"
            style = "bold red" if lock else ""
            item = str(w.item or w.relation or "")
            if narrow and item.startswith("public."):
                item = item[len("public."):]  # the default schema is noise on a small screen
            wait = str(w.wait_event or "CPU")
            if narrow and ":" in wait:
                wait = wait.split(":", 1)[1]  # the event name says it; the type is the prefix
            if w.blocked_by:
                # the blockers first: a narrow column must not clip who to look at
                wait = "← " + ",".join(map(str, w.blocked_by)) + " " + wait.split(":")[-1]
            prog = w.progress
            pcell = Text(" ")  # the gap after the right-aligned rows/s
            pcell.append_text(draw.bar(prog, widths["prog"] - 7, "red" if lock else "green"))
            pcell.append(f" {prog:4.0%}" if prog is not None else "    -")
            cells: dict[str, Any] = {
                "pid": Text(str(w.pid), style=style),
                "client": Text(str(w.client_pid or "-"), style=style),
                "phase": Text(("⚠ " if lock else "") + str(w.phase or ""),
                              style=style or ("dim" if w.phase == "idle" else "")),
                "item": Text(_clip(item, widths["item"] - 1), style=style),
                "bps": Text(fmt.rate(w.bytes_per_s)
                            if w.bytes_per_s else "-", style=style, justify="right"),
                "tps": Text(fmt.count(w.tuples_per_s)
                            if w.tuples_per_s else "-", style=style, justify="right"),
                "prog": pcell,
                "wait": Text(_clip(wait, widths["wait"] - 1),
                             style="bold white on red" if lock else ""),
            }
            out.append((str(w.pid), _ordered(cells, widths)))
        return out


COLUMN_ORDER = ("pid", "client", "phase", "item", "bps", "tps", "prog", "wait")


def _ordered(cells: Mapping[str, Any], widths: Mapping[str, int]) -> list[Any]:
    return [cells[k] for k in COLUMN_ORDER if k in widths]


def _sort_key(sort: str) -> Any:
    if sort == "bytes/s":
        return lambda w: (-(w.bytes_per_s or 0), w.pid)
    if sort == "progress":
        return lambda w: (-(w.progress or -1), w.pid)
    if sort == "phase":
        # workers in lock-wait first (they want attention), then the phases'
        # display order (pgparmon.phases)
        return lambda w: (w.phase != "lock-wait", phase_of(w.phase).order, w.pid)
    return lambda w: w.pid


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"
