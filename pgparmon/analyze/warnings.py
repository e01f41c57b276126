"""Things that will bite before the job ends, said while there is time.

- A session queued for AccessExclusiveLock behind a dump: the dump holds
  AccessShareLock on every table from the start, and each worker takes its own
  `LOCK TABLE ... NOWAIT` when it reaches a table; with an exclusive request
  queued, that NOWAIT fails and so does the whole dump.
- The target filesystem filling up, forecast from its free space trend.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..snapshot import Backend
from ..views import fmt
from .rates import WindowRate

FULL_BYTES = 1 << 20  # under 1 MiB free: full, for any practical purpose
SOON_S = 600.0


@dataclass(frozen=True)
class JobWarning:
    code: str
    message: str


def exclusive_waiters(backends: Iterable[Backend], members: set[int],
                      pending_tables: set[str]) -> list[JobWarning]:
    """Sessions (not the job's) waiting for an exclusive table lock that a
    job backend holds or is queued behind (for a job whose workers lock each
    table with NOWAIT, as pg_dump's do: such a queue makes it fail)."""
    out = []
    for b in backends:
        if b.pid in members or b.wait_event_type != "Lock" or not b.waiting_for:
            continue
        locktype, mode, rel = (list(b.waiting_for) + [None, None, None])[:3]
        if mode != "AccessExclusiveLock" or not (set(b.blocked_by) & members):
            continue
        if rel and rel not in pending_tables:
            continue  # that table's data is already dumped: nothing left to fail
        out.append(JobWarning(
            "exclusive-lock-waiter",
            f"session {b.pid} ({b.usename or '?'}) waits for AccessExclusiveLock on "
            f"{rel or 'a table'} behind the dump: the dump will fail when a worker reaches "
            f"that table (LOCK ... NOWAIT); cancel that session (pg_cancel_backend({b.pid})) "
            "or expect to rerun the dump"))
    return out


class FreeSpace:
    """Forecast of when the target filesystem fills, from its free bytes."""

    def __init__(self) -> None:
        self.used = WindowRate(max_age_s=120.0)
        self.first_free: float | None = None

    def add(self, t: float, free: int | None) -> None:
        if free is None:
            return
        if self.first_free is None:
            self.first_free = float(free)
        # used-since-start grows while the job writes; a counter WindowRate
        # understands (a drop means someone freed space: a new segment)
        self.used.add(t, max(0.0, self.first_free - free))

    def check(self, free: int | None, eta_s: float | None) -> list[JobWarning]:
        if free is None:
            return []
        if free < FULL_BYTES:
            return [JobWarning("disk-full", f"the target filesystem is full ({free} bytes free): "
                                         "the job will fail writing")]
        rate = self.used.rate(30.0)
        if not rate or rate <= 0:
            return []
        t_full = free / rate
        if t_full < SOON_S or (eta_s is not None and t_full < eta_s):
            tail = (f", before the job ends (ETA {fmt.duration(eta_s)})" if eta_s is not None
                    and t_full < eta_s else "")
            return [JobWarning("disk-full-soon",
                            f"the target filesystem will be full in about "
                            f"{fmt.duration(t_full)} at {fmt.rate(rate)} "
                            f"({fmt.size(free)} free){tail}")]
        return []
