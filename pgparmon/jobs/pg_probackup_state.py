"""What the pg_probackup driver keeps about one backup (its
Driver.new_state): the Tracker holds it without reading it;
pg_probackup.py and its steps, waits and ETA modules read and write it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .backup_rows import ProcessRows
from .walwait import WalWatch


@dataclass
class StepPass:
    """One step's reading of the ordered file list (the copy, the sync, the
    validation)."""

    inflight: list[str] = field(default_factory=list)  # the files in flight last seen
    # files seen in flight and gone since, past the frontier: their sizes
    finished: dict[str, int] = field(default_factory=dict)
    low: int = 0  # the frontier: how many files of the list are behind the work
    done: float = 0.0  # bytes done (the sync: files), never lower than seen
    hist: list[tuple[float, float]] = field(default_factory=list)  # (ts, done): the last 30 s
    left: dict[str, float] = field(default_factory=dict)  # bytes left of each file in flight
    busy: list[tuple[float, int]] = field(default_factory=list)  # (ts, files in flight)


@dataclass
class ProbackupState:
    # a row per file in flight (numbered 1..N: `slots`), and the process's CPU
    rows: ProcessRows = field(default_factory=ProcessRows)
    slots: dict[str, int] = field(default_factory=dict)  # file in flight -> its row
    rows_step: str | None = None  # the step the rows are of
    passes: dict[str, StepPass] = field(default_factory=dict)  # by step
    wal: WalWatch = field(default_factory=WalWatch)  # the archiver and the WAL position
    wal_start: dict[int, int] = field(default_factory=dict)  # WAL stream pid -> bytes sent at first
    # the plan: the files it copies, in its order (`index`, `sizes_in_order`,
    # `prefix`: bytes before each), whether that order is its own list's
    # (`exact`), the files never synced (`empty`) and those synced (`files`),
    # and where their trees really are (`roots`: relative root, real path)
    sizes: dict[str, int] = field(default_factory=dict)
    total: int | None = None
    exact: bool = False
    index: dict[str, int] = field(default_factory=dict)
    prefix: list[int] = field(default_factory=list)
    sizes_in_order: list[int] = field(default_factory=list)
    empty: int = 0
    files: int = 0
    roots: list[tuple[str, str]] = field(default_factory=list)
    # its catalog: the backup's directory, its backup.control, its earlier backups
    backup_dir: str | None = None
    control: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    now: float | None = None  # the last sample's ts
    phase: str | None = None  # starting | copy | stopping | sync | validate
    wait: dict[str, Any] | None = None  # what it waits on now (job.backup.wait)
    copied: bool = False  # it was seen copying
    # when (the samples' clock) its WAL stream began, the copy was last
    # seen, the stop and the validation began
    stream_began: float | None = None
    copy_seen: float | None = None
    stop_began: float | None = None
    validate_began: float | None = None
    validation_ahead: float | None = None  # seconds its validation will take, foreseen
    stop_ahead: float | None = None  # the stop's wait for the archiver beyond the copy
    # the copy's first and last (ts, bytes done); the bytes it wrote per
    # byte read, from its process's counters at first sight
    copy_first: tuple[float, float] | None = None
    copy_last: tuple[float, float] | None = None
    io_first: tuple[int, int] | None = None
    write_ratio: float | None = None
    # its threads (threads_of), their CPU seconds at the last sample, the
    # worker threads' CPU % since, and how many worker threads are alive
    threads: list[list[Any]] | None = None
    thread_cpu: dict[int, tuple[float, float]] = field(default_factory=dict)
    worker_cpu: dict[int, float] = field(default_factory=dict)
    workers_alive: int | None = None
