"""The TUI's JobHeader widget."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive

from ... import units as fmt
from ...sample import JobStatus, Sample
from .. import draw
from .text_lines import TextLines


STATE_STYLE = {"running": "bold green", "finished": "bold cyan", "failed": "bold red",
               "ended": "bold yellow"}


class JobHeader(TextLines):
    """Two lines: what runs where, then progress / ETA / rates."""

    doc: reactive[Sample | None] = reactive(None, always_update=True)
    label: reactive[str] = reactive("")  # PAUSED / replay position, beside the state

    def render(self) -> RenderableType:
        d = self.doc
        w = max(20, self.content_size.width)
        if d is None:
            return Text("waiting for the first sample…", style="dim")
        j = d.job
        l1 = Text(no_wrap=True, overflow="ellipsis")
        l1.append(str(j.kind or "?"), style="bold")
        if j.jobs:
            l1.append(f" -j {j.jobs}", style="bold")
        dbs = [db for db in j.databases if db != j.database]
        where = "whole cluster" if j.scope == "cluster" else str(j.database or "?")
        if j.host_only:
            where += " · host only, no server"
        l1.append(f"  {', '.join([where, *dbs])}")
        step = j.kind_fields.get("step")
        if step:  # a restore in steps: which one runs now
            l1.append(f"  step {step}", style="bold")
        if j.format:
            l1.append(f"  {j.format}", style="dim")
        right = Text()
        right.append(f"elapsed {fmt.duration(d.elapsed_s)}  ")
        state = str(j.state or "?")
        right.append(f"● {state}", style=STATE_STYLE.get(state, "bold"))
        if self.label:
            right.append(f"  {self.label}", style="bold reverse yellow")
        target = j.target
        room = w - l1.cell_len - right.cell_len - 2
        if target and room > 8:
            tgt = str(target)
            if len(tgt) > room - 3:
                tgt = "…" + tgt[-(room - 4):]
            l1.append(f"  {tgt}", style="dim")
        # how the job's sessions were found ("inferred: application_name, …"
        # reads "inferred") and where its progress comes from (a COPY job's
        # progress_basis), as room allows after the target
        extras = [str(j.grouping).split(":")[0] if j.grouping else "",
                  # a backup's phase (the server's words) says what it waits for
                  f"phase: {j.phase}" if j.backup and j.phase else "",
                  f"progress: {j.progress_basis}" if j.progress_basis else ""]
        for extra in filter(None, extras):
            if w - l1.cell_len - right.cell_len - 2 >= len(extra) + 2:
                l1.append(f"  {extra}", style="dim")
        l1.append(" " * max(1, w - l1.cell_len - right.cell_len))
        l1.append_text(right)

        prog = j.progress
        pct = f"{prog:6.1%}" if prog is not None else "   n/a"
        if j.eta_s is not None:
            # "≥ 58.0 s": a part left out (eta_reason says)
            eta = f"ETA {fmt.eta(j.eta_s, j.eta_reason)}"
        else:
            eta = f"ETA ? ({j.eta_reason or 'unknown'})"
        # a physical backup moves files, not rows; on a narrow screen the
        # bar keeps ten cells: rows/s gives way first, then the tables'
        # label, then their states (the items done stay)
        rows = "" if j.backup else f"  {fmt.count(j.tuples_per_s)} rows/s"
        rate = fmt.rate(j.bytes_per_s)
        tails = [f" {pct}  {eta}  {part}  {rate}{r}" for part in items(j) for r in (rows, "")]
        tail = next((t for t in tails if w - len(t) >= 10), tails[-1])
        l2 = Text(no_wrap=True, overflow="ellipsis")
        bw = max(10, w - len(tail))
        l2.append_text(draw.bar(prog, bw, "bold green" if state != "failed" else "red"))
        l2.append(tail)
        return Text("\n").join([l1, l2])


def items(j: JobStatus) -> list[str]:
    """What the job has done, longest first: where it counts its tables by
    state (job.tables, e.g. a logical sync's waiting, copying, catching up
    and ready), those counts (what waits and what runs, not only what is
    done), with and without their label; last the items done of the total.
    A count of 0 or null (a state not known from this side) is left out."""
    done = f"items {j.items_done or 0}/{j.items_total or 0}"
    tables = " · ".join(f"{n} {state.replace('_', ' ')}"
                        for state, n in (j.tables or {}).items()
                        if isinstance(n, int) and n > 0)
    return [f"tables {tables}", tables, done] if tables else [done]
