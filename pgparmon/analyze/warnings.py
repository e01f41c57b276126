"""Things that will bite before the job ends, said while there is time.

- A session queued for AccessExclusiveLock behind a dump: the dump holds
  AccessShareLock on every table from the start, and each worker takes its own
  `LOCK TABLE ... NOWAIT` when it reaches a table; with an exclusive request
  queued, that NOWAIT fails and so does the whole dump.
- The target filesystem filling up, forecast from its free space trend.
- Checkpoints forced by WAL volume while a load writes (max_wal_size too
  small for it): the same verdict `advise` gives before a restore.
- A restore's foreign key on a partitioned table added before the
  partitions' data (pg_restore -j's order): the same as advise's
  `fk_before_partitions`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..snapshot import Backend
from .. import units as fmt
from ..verdicts import register_warnings
from .rates import WindowRate

# A load into a cluster with data checksums (initdb -k) checksums every page
# it writes; seed 002 measured writes about 13% slower with them on.
CHECKSUMS_NOTE = ("the server has data checksums on: every page this load writes is "
                  "checksummed (about 13% slower writes; `advise` counts them in)")
FULL_BYTES = 1 << 20  # under 1 MiB free: full, for any practical purpose
SOON_S = 600.0


# the codes of the warnings below (pgparmon.verdicts): the exporter's
# one-hot series has each before it happens
CODES = register_warnings("exclusive-lock-waiter", "disk-full-soon", "disk-full", "checkpoints",
                          "fk-before-partitions", "archive-failing", "slot-lost",
                          "slot-retains-wal")


@dataclass(frozen=True)
class JobWarning:
    code: str  # one of CODES
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


def early_foreign_keys(items: Mapping[str, Any],
                       fk_keys: Iterable[str] | None = None) -> list[JobWarning]:
    """A restore's foreign key that runs (or ran) while data it checks has
    not started loading: pg_restore -j adds a partitioned table's key as
    soon as the referenced key is built (the archive names only the parent
    as its dependency), and every row loaded after it is checked one at a
    time. The plan makes such a key wait for its partitions' data, so a key
    running with one of those loads still pending is this race (a load
    that is running may be one the tracker has not yet seen end). items:
    the tracker's, by key; fk_keys: the keys of its foreign keys, when the
    tracker keeps them (else every item is looked at)."""
    out = []
    for it in (items.values() if fk_keys is None else (items[k] for k in fk_keys)):
        if it.kind != "fk" or it.state == "pending" or not it.deps:
            continue
        waiting = [items[k] for k in it.deps
                   if k in items and items[k].kind == "data" and items[k].state == "pending"]
        if not waiting:
            continue
        out.append(JobWarning(
            "fk-before-partitions",
            f"{it.name} was added before the data of {len(waiting)} of the tables it checks "
            f"({', '.join(sorted(w.relation or w.name for w in waiting)[:3])}"
            f"{', ...' if len(waiting) > 3 else ''}): their rows are checked one at a time as "
            "they load (about 3x slower loads measured); next time restore in steps, these "
            "keys last (pg_restore --section=pre-data, then -j N --section=data, -j N "
            "--section=post-data without the keys, then the keys: `pgparmon advise` gives "
            "the commands)"))
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


class Checkpoints:
    """Checkpoints the server was asked for (WAL reached max_wal_size, or a
    CHECKPOINT command) while the job ran, from the counters of
    pg_stat_bgwriter / pg_stat_checkpointer in each sample. Each flushes
    every dirty buffer (the load stalls behind it) and makes the next change
    of every page a full-page image in the WAL: more WAL, sooner the next
    one. Requested more often than checkpoint_timeout would time them, they
    are the load's doing, and max_wal_size (a reload, no restart) is the fix."""

    MIN_REQUESTED = 2

    def __init__(self) -> None:
        self.t0: float | None = None  # the first reading
        self.last: int | None = None  # the counter at the last reading
        self.requested = 0  # requested during the job
        self.last_t = 0.0  # when the count last rose
        self.noted = False  # said once in the job's notes

    def add(self, t: float, counts: tuple[int, int] | None) -> None:
        if counts is None:
            return
        req = counts[0]
        if self.last is None or req < self.last:  # the first reading, or a stats reset
            self.t0 = t if self.t0 is None else self.t0
            self.last = req
            return
        if req > self.last:
            self.requested += req - self.last
            self.last_t = t
        self.last = req

    def every_s(self) -> float | None:
        if self.t0 is None or self.requested < self.MIN_REQUESTED:
            return None
        return max(self.last_t - self.t0, 1e-3) / self.requested

    def check(self, settings: dict[str, str]) -> list[JobWarning]:
        every = self.every_s()
        timeout = _num(settings.get("checkpoint_timeout")) or 300.0
        if every is None or every >= timeout:
            return []
        wal_mb = _num(settings.get("max_wal_size"))
        now = f" ({fmt.size(wal_mb * 2 ** 20)})" if wal_mb else ""
        # enough WAL for a checkpoint_timeout at this pace, at least 4x today's
        want = max(4.0, timeout / every) * wal_mb if wal_mb else None
        fix = (f"ALTER SYSTEM SET max_wal_size = '{_round_mb(want)}'; SELECT pg_reload_conf();"
               if want else "raise max_wal_size (a reload, no restart)")
        return [JobWarning(
            "checkpoints",
            f"{self.requested} checkpoints requested during the job, one every "
            f"{fmt.duration(every)} (checkpoint_timeout {fmt.duration(timeout)}): the load's "
            f"WAL fills max_wal_size{now}, and each checkpoint stalls the writes and makes "
            f"the next ones full pages; takes effect without a restart: {fix}")]


def _num(v: str | None) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


def _round_mb(mb: float) -> str:
    """A max_wal_size value: whole GB from 1 GB up, else MB."""
    if mb >= 1024:
        return f"{math.ceil(mb / 1024)}GB"
    return f"{math.ceil(mb)}MB"


SLOT_RETAINS_BYTES = 2 ** 30  # an inactive slot holding this much WAL is worth a word


class BackupWal:
    """What threatens a physical backup's WAL: archive_command failing while
    the backup runs (pg_stat_archiver: failures since the job began, and the
    last one after the last success: a backup that waits for its WAL to be
    archived waits for ever), and replication slots nobody reads that keep
    WAL on the server's disk (the backup's WAL adds to it; a slot whose WAL
    is gone is lost)."""

    def __init__(self) -> None:
        self.failed_at_start: int | None = None

    def check(self, archiver: tuple[Any, ...] | None,
              slots: tuple[tuple[Any, ...], ...] | None) -> list[JobWarning]:
        out = []
        if archiver is not None:
            failed, last_wal, failed_t, ok_t = archiver[1], archiver[2], archiver[3], archiver[4]
            if self.failed_at_start is None or failed < self.failed_at_start:
                self.failed_at_start = failed  # the first reading, or a stats reset
            since = failed - self.failed_at_start
            # failing now: its last failure after its last success
            if failed_t is not None and (ok_t is None or failed_t > ok_t):
                out.append(JobWarning(
                    "archive-failing",
                    "archive_command is failing"
                    + (f" ({since} failure(s) since the backup began)" if since else "")
                    + f": last failed segment {last_wal}, nothing archived since; a backup "
                    "that waits for its WAL to be archived waits until it is fixed (the "
                    "server log says why)"))
        for name, kind, active, status, retained in slots or ():
            if active:
                continue
            if status == "lost":
                out.append(JobWarning(
                    "slot-lost", f"replication slot {name} ({kind}) lost the WAL it needed: "
                    f"its consumer cannot resume; drop it: SELECT "
                    f"pg_drop_replication_slot('{name}');"))
            elif retained is not None and retained >= SLOT_RETAINS_BYTES:
                out.append(JobWarning(
                    "slot-retains-wal", f"inactive replication slot {name} ({kind}) keeps "
                    f"{fmt.size(retained)} of WAL on the server's disk"
                    + (f" (wal_status {status})" if status else "")
                    + "; the backup's WAL adds to it: drop it if nothing will read it again "
                    f"(SELECT pg_drop_replication_slot('{name}');)"))
        return out
