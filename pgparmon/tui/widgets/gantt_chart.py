"""The TUI's GanttChart widget."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive

from ...analyze.timeline import Span
from .. import draw
from .text_lines import TextLines


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
