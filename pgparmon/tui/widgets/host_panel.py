"""The TUI's HostPanel widget."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive

from ... import units as fmt
from ...sample import HostLoad
from .. import draw
from .text_lines import TextLines


class HostPanel(TextLines):
    """CPU per core, memory, the job's disks."""

    host: reactive[HostLoad | None] = reactive(None, always_update=True)

    def render(self) -> RenderableType:
        h = self.host
        if h is None:
            return Text("host: n/a (no sample yet, or the server is on another host)",
                        style="dim")
        w = max(20, self.content_size.width)
        t = Text(no_wrap=True, overflow="ellipsis")
        cpu = h.cpu_percent
        t.append("CPU ", style="bold")
        t.append(f"{cpu:.0f}%" if cpu is not None else "n/a")
        if h.iowait_percent is not None:
            t.append(f"  iowait {h.iowait_percent:.0f}%",
                     style="yellow" if h.iowait_percent >= 20 else "")
        if h.mem_used_percent is not None:
            t.append(f"  mem {h.mem_used_percent:.0f}%")
        t.append("\n")
        per = list(h.per_cpu)
        # per-core bars only when they fit beside the disks; else one cell each
        rows_left = max(1, self.content_size.height - 1 - 2 * len(h.disks))
        if len(per) > rows_left:
            t.append_text(draw.cpu_cores(per, 0))
        else:
            t.append_text(draw.cpu_cores(per, w))
        for name, d in h.disks.items():
            t.append("\n")
            t.append(f"{name} ", style="bold")
            t.append(f"r {fmt.rate(d.read_bytes_per_s)}  "
                     f"w {fmt.rate(d.write_bytes_per_s)}")
            t.append("\n")
            aw = d.await_ms
            q = d.queue_depth
            t.append(f"  util {d.util_percent or 0:.0f}%  "
                     f"await {'-' if aw is None else f'{aw:.1f}ms'}  "
                     f"queue {'-' if q is None else f'{q:.1f}'}", style="dim")
        if not h.disks:
            t.append("\ndisks: none measured", style="dim")
        return t
