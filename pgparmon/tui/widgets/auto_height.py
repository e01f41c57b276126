"""The TUI's AutoHeight widget."""

from __future__ import annotations


from rich.cells import cell_len
from rich.text import Text
from textual.timer import Timer
from textual.widget import Widget


class AutoHeight(Widget):
    """A widget of auto height whose text changes every sample: a layout pass
    (the whole screen re-rendered, twice the cost of a sample's frame) only
    when its height must change. It grows at once; it gives lines back only
    once its text has been shorter for SHRINK_AFTER_S seconds (a verdict
    whose detail wraps to two lines one second and fits in one the next kept
    the screen's body jumping and cost a layout pass a second). The height
    held is its min-height (its max-height still caps it)."""

    SHRINK_AFTER_S = 10.0
    _held = -1  # the lines held (-1: none yet)
    _shrink_timer: Timer | None = None
    layouts = 0  # layout passes asked for (for tests)

    def _text_lines(self) -> int:
        """Lines the text takes at the widget's width; -1 when unknown."""
        width = self.content_size.width or self.size.width
        if width <= 0:
            return -1
        r = self.render()
        if not isinstance(r, Text):
            return -1
        # lines that fit need no wrapping to be counted (most samples)
        parts = r.plain.split("\n")
        return (len(parts) if all(cell_len(p) <= width for p in parts)
                else len(r.wrap(self.app.console, width)))

    def _relayout_if_taller_or_shorter(self) -> None:
        lines = self._text_lines()
        if 0 <= lines < self._held:
            if self._shrink_timer is None:
                self._shrink_timer = self.set_timer(self.SHRINK_AFTER_S, self._shrink)
            self.refresh()
            return
        if self._shrink_timer is not None:
            self._shrink_timer.stop()
            self._shrink_timer = None
        if lines == self._held and lines >= 0:
            self.refresh()
        else:  # taller, or not measurable yet (no width): a layout decides
            self._hold(lines)

    def _shrink(self) -> None:
        self._shrink_timer = None
        lines = self._text_lines()
        if lines != self._held:
            self._hold(lines)

    def _hold(self, lines: int) -> None:
        self._held = lines
        self.styles.min_height = None if lines < 0 else lines + self.styles.gutter.height
        self.layouts += 1
        self.refresh(layout=True)
