"""The TUI's AdviceLine widget."""

from __future__ import annotations


from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive

from ...analyze.advice_live import LiveAdvice
from .auto_height import AutoHeight


class AdviceLine(AutoHeight):
    advice: reactive[LiveAdvice | None] = reactive(None)

    def watch_advice(self) -> None:
        self._relayout_if_taller_or_shorter()

    def render(self) -> RenderableType:
        a = self.advice
        if a is None:
            return Text("advice: not enough data yet", style="dim")
        t = Text()
        t.append("advice: ", style="bold")
        t.append(a.headline, style="bold magenta" if a.next_jobs else "")
        if a.detail:
            t.append("\n")
            t.append(a.detail, style="dim")
        return t
