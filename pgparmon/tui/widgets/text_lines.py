"""The TUI's TextLines widget."""

from __future__ import annotations

from typing import Any, Self

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget


class TextLines(Widget):
    """A widget whose render() is one Rich Text of short lines (no wrapping),
    drawn straight to strips: each line rendered by Rich, cut to the width
    (with its ellipsis when the text asks for one), on the widget's own
    style. Textual's general path (the Text made a Content, wrapped, made
    strips) cost about twice as much for the charts and the host panel,
    which are redrawn every sample. Other renderables take that path.

    A new sample repaints only the lines that changed: a plain repaint of
    the whole widget (a reactive set with new data) is turned into a render
    a moment later whose strips are compared with the last ones, and only
    the lines that differ are marked dirty; Textual then styles, composes
    and writes those lines alone (most of a panel, its labels and the
    older part of a chart, stays as it was). A change of size, style or
    border title, or a non-Text render, repaints the whole widget."""

    _strips: list[Strip] | None = None
    _strips_size: Size | None = None
    _strips_chrome: tuple[Any, ...] | None = None
    _stale = True  # the whole widget was marked dirty: render afresh
    _diff_armed = False
    lines_repainted = 0  # lines marked dirty by the diff (tests read it)

    def _chrome(self) -> tuple[Any, ...]:
        return (self.visual_style, self.border_title, self.border_subtitle)

    def _set_dirty(self, *regions: Region) -> None:
        if not regions:
            self._stale = True
        super()._set_dirty(*regions)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        if (repaint and not (regions or layout or recompose) and self._strips is not None
                and not self._stale and self.is_mounted):
            if not self._diff_armed:
                self._diff_armed = True
                self.call_next(self._repaint_changed_lines)
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _repaint_changed_lines(self) -> None:
        self._diff_armed = False
        old = self._strips
        if (old is None or self._stale or self._strips_size != self.size
                or self._strips_chrome != self._chrome()):
            super().refresh()
            return
        r = self.render()
        if not isinstance(r, Text):
            self._strips = None
            super().refresh()
            return
        new = self._text_strips(r)
        self._strips = new
        blank = Strip.blank(self.size.width, self.visual_style.rich_style)
        width = self.content_size.width
        changed = [Region(0, y, width, 1) for y in range(max(len(old), len(new)))
                   if (old[y] if y < len(old) else blank) != (new[y] if y < len(new) else blank)]
        if changed:
            self.lines_repainted += len(changed)
            super().refresh(*changed)

    def render_line(self, y: int) -> Strip:
        if self._strips is None or self._stale or self._strips_size != self.size:
            r = self.render()
            if not isinstance(r, Text):
                self._strips = None
                return super().render_line(y)
            self._strips = self._text_strips(r)
            self._strips_size = self.size
            self._strips_chrome = self._chrome()
            self._stale = False
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def _text_strips(self, text: Text) -> list[Strip]:
        # the whole Text rendered once and its segments split at newlines:
        # a Text made per line (Text.split) cost three times as much
        width, height = self.size
        base = self.visual_style.rich_style
        ellipsis = text.overflow == "ellipsis"
        out: list[Strip] = []
        for segs in Segment.split_lines(text.render(self.app.console)):
            if len(out) >= height:
                break
            strip = Strip(Segment.apply_style(segs, base))
            if strip.cell_length > width:
                if ellipsis and width > 1:
                    last = strip.crop(width - 1, width)
                    style = last._segments[0].style if last._segments else base
                    strip = Strip.join([strip.crop(0, width - 1), Strip([Segment("…", style)])])
                else:
                    strip = strip.crop(0, width)
            out.append(strip.adjust_cell_length(width, base))
        return out
