"""Several jobs at once: the list `attach` offers when it finds more than
one (the TUI's picker, the `pgparmon.jobs/1` JSON object, the error line).

`list_jobs(target)` is the discovery the picker calls again on refresh: one
connection, one sample, the same `find_jobs` as attach, each job with its
sessions and start time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .connect import ConnTarget
from .discover import DiscoveryError, find_jobs
from .exitcodes import ExitCode
from .jobs.base import TREE, Job
from .jobs.registry import recognise_for, sample_extras
from .readers import procs
from .readers.db import DbSampler, ServerFacts
from .snapshot import DbSample

SCHEMA = "pgparmon.jobs/1"


@dataclass(frozen=True)
class FoundJob:
    """A job as the picker lists it."""

    job: Job
    sessions: int  # its server sessions now (parallel workers not counted)
    started: float | None  # unix time: its client process, else its first session
    backends: tuple[int, ...] = ()  # those sessions' pids

    @property
    def pid(self) -> int | None:
        """The pid `attach --pid` follows it by: its client process, or one of
        its backends when the client cannot be seen."""
        if self.job.client_pid:
            return self.job.client_pid
        pids = self.job.pid_hint or frozenset(self.backends)
        return min(pids) if pids else None

    @property
    def grouping(self) -> str:
        """How its sessions were grouped: a COPY job says; a dump or restore
        found from its processes is a process tree, else inferred."""
        if self.job.grouping:
            return self.job.grouping
        return TREE if self.job.client_pid else "inferred: application_name, database"

    def to_dict(self, now: float) -> dict[str, Any]:
        j = self.job
        return {
            "kind": j.kind, "command": list(j.command), "database": j.database,
            "databases": j.database_list(), "jobs": j.jobs, "sessions": self.sessions,
            "client_pid": j.client_pid, "pid": self.pid,
            "started": (datetime.fromtimestamp(self.started, tz=UTC)
                        .isoformat(timespec="seconds") if self.started else None),
            "running_s": round(max(0.0, now - self.started), 1) if self.started else None,
            "grouping": self.grouping, "target": j.target, "relation": j.relation,
            "description": j.describe(),
        }


def found_jobs(jobs: list[Job], db: DbSample) -> list[FoundJob]:
    """Each job with its sessions (a session counts for the first job it
    belongs to: the backends linked to a job at discovery, else its driver's
    grouping rule) and when it started."""
    sessions = [b for b in db.backends if b.backend_type == "client backend"]
    claimed: set[int] = set()
    mine: list[list[int]] = []
    for j in jobs:  # linked sessions first: they are certain
        own = [b.pid for b in sessions if b.pid in j.pid_hint and b.pid not in claimed]
        claimed |= set(own)
        mine.append(own)
    out: list[FoundJob] = []
    for j, own in zip(jobs, mine, strict=True):
        if not own and j.grouping != TREE:
            driver = recognise_for(j.kind)
            own = [b.pid for b in sessions if b.pid not in claimed and driver.belongs(j, b)]
            claimed |= set(own)
        started: float | None = None
        if j.client_pid:
            info = procs.proc_info(j.client_pid)
            started = info.create_time if info else None
        if started is None:
            starts = [b.backend_start for b in sessions if b.pid in own and b.backend_start]
            started = min(starts) if starts else None
        out.append(FoundJob(job=j, sessions=len(own), started=started,
                            backends=tuple(sorted(own))))
    return out


def list_jobs(target: ConnTarget) -> list[FoundJob]:
    """Every job on the server now (one connection, closed again). Raises
    ConnectError, or DiscoveryError when the sample fails."""
    sampler = DbSampler(target, **sample_extras())
    facts: ServerFacts = sampler.open()
    try:
        db = sampler.sample()
        if db.error:
            raise DiscoveryError(db.error, ExitCode.CONNECT)
        return found_jobs(find_jobs(facts, db, scan_processes=True), db)
    finally:
        sampler.close()


def jobs_document(found: list[FoundJob], now: float) -> dict[str, Any]:
    """The `pgparmon.jobs/1` object `attach --json` prints when it finds
    several jobs (docs/json.md)."""
    return {"schema": SCHEMA, "jobs": [f.to_dict(now) for f in found]}
