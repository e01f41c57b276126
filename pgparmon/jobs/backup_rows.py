"""What the backup drivers that follow a tool's own processes share
(pgBackRest's backup and restore, pg_probackup): a process's worker row
(its byte counter and CPU), the rows of the processes copying now, how far
a copy got for a verdict, and the ETA at the rate of the copy's last
seconds. Each works on the driver's own state and the Tracker's narrow
API, and knows no tool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import units as fmt
from ..analyze.items import Item, WorkerState
from ..snapshot import ClientProc, Snapshot

if TYPE_CHECKING:
    from ..analyze.progress import Tracker


@dataclass
class ProcessRows:
    """The worker rows a backup driver keeps of its tool's processes (or of
    the files in flight) and their CPU: part of the driver's state."""

    procs: dict[int, WorkerState] = field(default_factory=dict)  # row id -> its row
    cpu: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid -> (ts, CPU s)
    cpu_pct: dict[int, float] = field(default_factory=dict)  # pid -> % of a core, last interval
    active: list[int] = field(default_factory=list)  # the rows that copy now


def process_row(rows: ProcessRows, w: WorkerState, c: ClientProc, snap: Snapshot,
                prev_cpu: tuple[float, float] | None, counted: int | None) -> None:
    """A tool process's row: its byte counter (read or written) and its CPU
    since the last sample."""
    if counted is not None:
        w.bytes_done = counted
        w.bytes_rate.add(snap.ts, counted)
    if prev_cpu is not None and c.cpu_s is not None and snap.ts > prev_cpu[0]:
        rows.cpu_pct[c.pid] = 100.0 * (c.cpu_s - prev_cpu[1]) / (snap.ts - prev_cpu[0])
    w.last_seen = snap.ts


def prune_rows(tr: Tracker, rows: ProcessRows, active: set[int]) -> None:
    """The rows of the processes that copy now; those that stopped go."""
    procs = rows.procs
    for pid in list(procs):
        if pid not in active:
            del procs[pid]
            tr.drop_worker(pid)
            rows.cpu_pct.pop(pid, None)
    for w in procs.values():
        tr.add_worker(w)
    rows.active = sorted(active)


def how_far(it: Item | None, has_total: bool, phase: str | None) -> str:
    """How far a copy got, in bytes of its total, for a verdict."""
    if it is None or not has_total:
        return f"in phase {phase or '?'}"
    return (f"at {100.0 * it.fraction:.1f}% ({fmt.size(it.done)} of {fmt.size(it.work)}), "
            f"phase {phase or '?'}")


def window_eta(it: Item | None, hist: Any) -> tuple[float | None, str | None]:
    """The rest of the copy at the rate of its last seconds: hist holds
    (ts, done, work) samples, those of another total left out.  A rate needs
    a second of them, or three samples (two intervals) where the samples
    come faster: a copy that lasts a second or two at a short interval
    still gets an ETA before its end."""
    pts = [h for h in hist if it is not None and h[2] == it.work]
    if it is None or len(pts) < 2 or (len(pts) < 3 and pts[-1][0] - pts[0][0] < 1.0):
        return None, "measuring"
    rate = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
    if rate <= 0:
        return None, "measuring"
    return max(0.0, it.work - it.done) / rate, None
