"""The TUI's SummaryTable widget."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text
from textual.widgets import DataTable

from ...views.summary import EndSummary, ItemGroup, fit_columns, row_cells
from .workers_table import SCROLLBARS


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
