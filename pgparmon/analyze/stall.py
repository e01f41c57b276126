"""Whether a job is stalled: active sessions, and no measurable progress
for a while.

Pure: it reads the Tracker's history (time, active workers, work done) and
its workers' recent byte rates, and asks the phase registry which phases
make no progress by design.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from ..jobs.progress import progress_of
from ..jobs.registry import phase_of

if TYPE_CHECKING:
    from .progress import Tracker

STALL_SAMPLES = 5
# ... and at least this long: at a short interval five samples are a second
# or so, less than a tool may spend between two reads (compressing a buffer,
# opening the next file) without being stalled
STALL_MIN_S = 5.0


class Stall:
    """A job's stall watch: `stalled` is asked once a sample. A wait by
    design (a backup's start) is never a stall, and the stall after it is
    counted from the next step's first sample, not across the wait (a copy
    whose first samples show no bytes yet is not stalled by the wait)."""

    def __init__(self) -> None:
        # when the job's step began (its first sample after a wait by
        # design; None: it never waited)
        self.step_since: float | None = None
        self.waited = False

    def stalled(self, tr: Tracker, ended: bool) -> bool:
        if progress_of(tr).between_steps(tr):
            self.waited = True  # a stall is counted from the next step's first sample
            return False
        h = tr.history
        if self.waited and h:
            self.waited, self.step_since = False, h[-1][0]
        if self.step_since is not None:
            h = h[bisect.bisect_left(h, self.step_since, key=lambda x: x[0]):]
        return stalled(tr, ended, h)


def stalled(tr: Tracker, ended: bool, h: list[tuple[float, int, float]] | None = None) -> bool:
    """No progress over the last STALL_SAMPLES samples (and STALL_MIN_S) of
    `h` (default: the Tracker's whole history) while some of the job's
    sessions were active, and nothing of the job's own explains the pause.
    A job that ended is not stalled."""
    h = tr.history if h is None else h
    if len(h) < STALL_SAMPLES or ended or progress_of(tr).between_steps(tr):
        return False
    n = STALL_SAMPLES
    while n < len(h) and h[-1][0] - h[-n][0] < STALL_MIN_S:
        n += 1
    if h[-1][0] - h[-n][0] < STALL_MIN_S:
        return False  # not watched long enough to call it stalled
    last = h[-n:]
    active = any(a > 0 for _, a, _ in last)
    if not (active and last[-1][2] <= last[0][2] and all(
            (w.bytes_rate.rate(STALL_MIN_S) or 0) == 0 for w in tr.workers.values())):
        return False
    # no measurable progress, but the job's own sessions work on something
    # no view measures (a statement between a copy and its index builds),
    # or wait for a lock another of its sessions holds: not stalled
    mine = set(tr.workers)
    for w in tr.workers.values():
        if w.phase == "other" and w.state == "active" and not (
                w.wait_event or "").startswith("Client"):
            return False
        if w.phase == "lock-wait" and w.blocked_by and set(w.blocked_by) <= mine:
            return False
        if phase_of(w.phase).waits:
            return False
    return True
