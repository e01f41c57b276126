"""The TUI's ThroughputChart widget."""

from __future__ import annotations


from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive

from ...analyze.timeline import SeriesPoint
from .. import draw
from .text_lines import TextLines


class ThroughputChart(TextLines):
    """Total COPY bytes/s over the whole run, active workers below it."""

    series: reactive[tuple[SeriesPoint, ...]] = reactive((), always_update=True)
    jobs: reactive[int | None] = reactive(None)

    def render(self) -> RenderableType:
        if not self.series:
            return Text("throughput: no samples yet", style="dim")
        return draw.throughput_chart(self.series, self.content_size.width,
                                     max(3, self.content_size.height), self.jobs)
