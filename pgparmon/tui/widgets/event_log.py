"""The TUI's EventLog widget."""

from __future__ import annotations


from textual.geometry import Size
from textual.reactive import Reactive
from textual.widgets import RichLog


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
