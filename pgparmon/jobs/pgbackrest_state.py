"""What the pgBackRest backup driver keeps about one backup (its
Driver.new_state): the Tracker holds it without reading it; pgbackrest.py
and pgbackrest_waits.py read and write it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .backup_rows import ProcessRows
from .walwait import WalWatch


@dataclass
class BackrestState:
    rows: ProcessRows = field(default_factory=ProcessRows)  # its local processes
    wal: WalWatch = field(default_factory=WalWatch)  # the archiver and the WAL position
    pgdata: float | None = None  # the data directory's bytes, from the plan
    # its lock file: the percentage done (hundredths of a percent, never
    # lower than seen), its total and bytes done (`sz`, `szCplt`: 2.48+)
    pct: float | None = None
    size: int | None = None
    size_done: int | None = None
    lock_file: str | None = None
    backup_dir: str | None = None  # the backup's directory in a posix repository
    completed: bool | None = None  # backup.info lists it (None: not read, or not readable)
    archive_stop: str | None = None  # the segment its stop waits for (its manifest's copy)
    phase: str | None = None  # starting | copy | archive-wait | finishing
    wait: dict[str, Any] | None = None  # what it waits on now (job.backup.wait)
    unit: str | None = None  # what its item counts: "bytes" or "percent" (None: nothing yet)
    # (ts, done, work) over the copy's last seconds: the ETA's rate
    hist: list[tuple[float, float, float]] = field(default_factory=list)
    stop_ahead: float | None = None  # the stop's wait for the archiver beyond the copy
    copied: bool = False  # its local processes were seen copying
    start_seen: bool = False  # pg_backup_start has switched out of the segment
