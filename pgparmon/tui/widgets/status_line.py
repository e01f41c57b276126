"""The TUI's StatusLine widget."""

from __future__ import annotations


from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive

from .text_lines import TextLines


class StatusLine(TextLines):
    """Sampling cadence, pause, errors from the feed or the server, notes.
    An error sets the -error class: the line turns red and stays until a
    good sample arrives."""

    text: reactive[Text] = reactive(Text(""), always_update=True)

    def render(self) -> RenderableType:
        return self.text
