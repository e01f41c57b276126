"""Opening the job to follow: connect, find it (waiting for it to appear
when asked), and hand back its Monitor; or the job of a client process
`pgparmon run` started itself.

The Monitor neither connects nor waits: `attach` (follow.py) and the tests
open their job here, and `run` (launch.py) names its job with
`job_for_process`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .connect import ConnTarget
from .discover import DiscoveryError
from .exitcodes import ExitCode
from .jobs.base import Job
from .jobs.registry import driver_for_argv, job_titles, parse_argv
from .monitor import Monitor
from .source import HostSource, LiveSource, RecordingSource

# `attach --pid PID` without --wait: a process of this host that has not
# opened its session yet (a tool just started, a loader reading its input
# first) is looked for again until it has run this long
PID_GRACE_S = 10.0
PID_POLL_S = 0.25


def wait_for_job(target: ConnTarget | None, pid: int | None, wait_s: float | None,
                 interval: float = 1.0, recorder: Any = None,
                 copy_source: ConnTarget | None = None, host_only: bool = False,
                 why: str | None = None) -> Monitor:
    """Connect and find the job, waiting up to wait_s for one to appear;
    host_only: no connection, a job of this host's processes alone.

    pid: the job that process belongs to. Without wait_s, a live process of
    this host younger than PID_GRACE_S is given until that age to show a
    session (a tool attached to right after it started); a process that ends
    meanwhile ends the wait at once."""
    from .readers import procs

    live: LiveSource | HostSource
    if host_only or target is None:
        live = HostSource(pid=pid, why=why)
    else:
        live = LiveSource(target, pid=pid, copy_source=copy_source)
    source: Any = RecordingSource(live, recorder) if recorder is not None else live
    proc = procs.proc_info(pid) if pid is not None and pid > 0 else None
    grace = False
    if wait_s is None and proc is not None:
        left = PID_GRACE_S - (time.time() - proc.create_time)
        if left > 0:
            wait_s, interval, grace = left, min(interval, PID_POLL_S), True
    deadline = time.monotonic() + (wait_s or 0)
    # A job that appears while we wait is just starting, when its processes
    # and sessions change fastest: a migration tool's pg_dump seen before the
    # transaction it is a step of, a worker's session before its process. It
    # is followed once two looks a moment apart find the same job (or the
    # same several): what one look alone found may be a passing fragment.
    waited = False
    seen: object = None  # what the last look found while waiting
    while True:
        try:
            if waited:
                live.look_again()
                found = _signature(live.discover())
                if found != seen and time.monotonic() < deadline:
                    seen = found
                    time.sleep(min(interval, PID_POLL_S))
                    continue
            mon = Monitor(source)
            mon.discover()  # after a look that found it: that job, recorded
            return mon
        except DiscoveryError as exc:
            if exc.code == ExitCode.SEVERAL_JOBS and waited and time.monotonic() < deadline:
                found = tuple(sorted(map(_signature, exc.jobs), key=repr))
                if found != seen:
                    seen = found
                    time.sleep(min(interval, PID_POLL_S))
                    continue
            if exc.code != ExitCode.NO_JOB:
                live.close()
                raise
            seen = None
            gone = proc is not None and not procs.alive(proc.pid)
            if gone or wait_s is None or time.monotonic() >= deadline:
                live.close()
                if proc is None or not (gone or wait_s):
                    raise
                raise DiscoveryError(_pid_unseen(proc, gone, grace, wait_s or 0.0,
                                                 isinstance(live, HostSource)),
                                     ExitCode.NO_JOB) from None
            live.job = None
            waited = True
            time.sleep(interval)


def _signature(job: Job) -> tuple[object, ...]:
    """What tells one look's job from another's: its client process, or
    for a job of sessions alone, its sessions."""
    if job.client_pid:
        return (job.kind, job.client_pid)
    return (job.kind, job.database, job.grouping, tuple(sorted(job.pid_hint)))


def _pid_unseen(proc: Any, gone: bool, grace: bool, waited: float, host_only: bool) -> str:
    """Why `attach --pid` found no job of a live process it waited for."""
    what = f"process {proc.pid} ({proc.name})"
    if host_only:
        where, check = "on this host", "--host-only follows tools that run with the server down"
        why = f"it is no {job_titles(host_only=True)}"
    else:
        where, check = "on this server", "check that -h/-p/-d point at the job's server"
        why = f"it opened no session, or none of a {job_titles()}"
    if gone:
        return f"{what} ended before a job of it was seen {where} ({check})"
    if grace:
        return (f"no job of {what} {where} {PID_GRACE_S:g} s after it started ({why}): "
                f"{check}; give --wait S to wait longer")
    return f"no job of {what} {where} after waiting {waited:g} s ({why}): {check}"


def job_for_process(pid: int, argv: list[str], app_name: str) -> Job:
    """The job of a client process we started ourselves (`pgparmon run`)."""
    from .redact import redact_argv

    args = parse_argv(argv)
    driver = driver_for_argv(argv)
    assert driver is not None
    job = Job(kind=driver.kind, database=args.dbname or os.environ.get("PGDATABASE"),
              client_pid=pid, jobs=args.jobs, format=args.format, target=args.file,
              command=tuple(redact_argv(argv)), app_name=app_name, args=args)
    return driver.refine(job, [])
