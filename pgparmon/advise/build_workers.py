"""The server's parallel index builds in a restore's schedule.

pg_restore's btree builds (CREATE INDEX, ADD PRIMARY KEY / UNIQUE) run on
the regular tables it has just loaded, so from PostgreSQL 11 each may take
parallel workers beside its own backend. The server decides how many when
the build starts (its planner, for a plain btree build):

- none on a table under min_parallel_table_scan_size (8 MB by default), one
  from there, and one more each time the table is three times larger again
  (24 MB, 72 MB, ...), at most max_parallel_maintenance_workers (2 by
  default);
- fewer while maintenance_work_mem would leave a participant (the workers
  and the leader) under 32 MB: the default 64 MB allows one worker;
- launched only while the server's pool has free ones (max_parallel_workers,
  within max_worker_processes): builds that start together share it.

The workers scan and sort the table beside the leader, which then merges
their sorted runs and writes the index alone. Measured on a table of 300 MB
(bench/parallel_build.py, one worker beside the leader): a btree on an int
key in the table's order (a serial key, as a restore loads it) gained
nothing (0.99x: what it costs is the scan and the write, not its sort);
the same rows' int key in random order (2.3x the in-order build) gained
1.5x, an md5 text key (3.7x) 1.4x. So a build's time with n participants
is taken as one in-order int build's worth that stays with the leader, and
what its key's sorting adds beyond that shared among them: for a build of
key cost c (ddl.KEY_COSTS, the build's cost a row against an int key's)
time(n) / time(1) = (1 + (c - 1) / n) / c. An int key gains nothing, a
text key (c = 2) 1.33x with one worker and 1.5x with two.

A worker runs only on a core that no other build or load holds, so the
advice lends them (analyze.schedule.Helpers) at each build's start from the
cores the schedule leaves free then: at a low -j a text key's build runs
faster than one process would, at a -j that fills the cores it gains
nothing. An int build's workers take their cores too (the server launches
them all the same).

The probe times its build on a temporary table, which never gets workers:
a serial build, the base this divides. An expression or another access
method's build is left serial (a user function in the expression may not be
parallel safe; btree is the method that builds in parallel before 17).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..analyze.schedule import Helpers
from .inventory import setting_bytes, setting_int

MIN_PARTICIPANT_MEM = 32 * 1024 * 1024  # the planner's floor a participant
DEFAULT_MIN_SCAN = 8 * 1024 * 1024  # min_parallel_table_scan_size's default
PARALLEL_BUILDS_SINCE = 110000  # PostgreSQL 11


@dataclass(frozen=True)
class BuildWorkers:
    """What the target server gives a build, from its settings."""

    max_per_build: int  # max_parallel_maintenance_workers
    pool: int  # min(max_parallel_workers, max_worker_processes)
    maintenance_work_mem: float  # bytes
    min_scan_bytes: float = DEFAULT_MIN_SCAN

    @classmethod
    def of(cls, settings: Mapping[str, Any], version_num: int | None) -> BuildWorkers | None:
        """From the server's settings (advise's query); None when it builds
        serially (before 11, or max_parallel_maintenance_workers 0) or the
        settings are not there to tell."""
        if version_num is None or version_num < PARALLEL_BUILDS_SINCE:
            return None
        per = setting_int(settings, "max_parallel_maintenance_workers")
        mwm = setting_bytes(settings, "maintenance_work_mem")
        procs = setting_int(settings, "max_worker_processes")
        if not per or per <= 0 or not mwm or procs is None:
            return None
        pool = setting_int(settings, "max_parallel_workers")
        pool = procs if pool is None else min(pool, procs)
        scan = setting_bytes(settings, "min_parallel_table_scan_size")
        return cls(per, pool, mwm, scan if scan is not None else DEFAULT_MIN_SCAN)

    def planned(self, heap_bytes: float) -> int:
        """The workers the server plans for a btree build on a table of
        `heap_bytes` (before the pool's limit)."""
        if heap_bytes < self.min_scan_bytes or self.min_scan_bytes <= 0:
            return 0
        n, threshold = 1, self.min_scan_bytes
        while heap_bytes >= threshold * 3 and n < self.max_per_build:
            n += 1
            threshold *= 3
        n = min(n, self.max_per_build)
        while n > 0 and self.maintenance_work_mem / (n + 1) < MIN_PARTICIPANT_MEM:
            n -= 1
        return n

    @staticmethod
    def speedup(key_cost: float, participants: int) -> float:
        """A build's speed with this many participants against one alone:
        an in-order int build's worth stays serial, the rest of its key's
        cost (`key_cost` >= 1) is shared."""
        c, p = max(1.0, key_cost), max(1, participants)
        return c / (1.0 + (c - 1.0) / p)

    def helpers(self, builds: Mapping[str, tuple[float, float]], cores: int) -> Helpers | None:
        """The schedule's Helpers for these builds (item key -> its table's
        heap bytes and its key cost) on a host of `cores`; None when none
        would get any."""
        wants = {k: n for k, (heap, _) in builds.items() if (n := self.planned(heap)) > 0}
        if not wants or cores < 2 or self.pool <= 0:
            return None
        costs = {k: cost for k, (_, cost) in builds.items()}
        return Helpers(wants, self.pool, cores,
                       lambda key, n: self.speedup(costs.get(key, 1.0), n))

    def describe(self) -> str:
        """The settings the lending follows, for the advice's note."""
        mib = self.maintenance_work_mem / (1 << 20)
        return (f"max_parallel_maintenance_workers {self.max_per_build}, maintenance_work_mem "
                f"{mib:.0f} MB, {self.pool} in the server's pool")
