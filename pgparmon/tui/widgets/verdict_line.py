"""The TUI's VerdictLine widget."""

from __future__ import annotations


from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive

from .auto_height import AutoHeight


GOOD_VERDICTS = ("nothing", "starting")


class VerdictLine(AutoHeight):
    """What limits the run now (the bottleneck verdict), one or two lines."""

    verdict: reactive[tuple[str, str] | None] = reactive(None)

    def watch_verdict(self) -> None:
        self._relayout_if_taller_or_shorter()

    def render(self) -> RenderableType:
        if self.verdict is None:
            return Text("limit: -", style="dim")
        kind, detail = self.verdict
        t = Text()
        t.append(f"limit: {kind}", style="bold green" if kind in GOOD_VERDICTS else
                 "bold yellow")
        t.append(f" — {detail}")
        return t
