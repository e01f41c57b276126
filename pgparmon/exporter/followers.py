"""The exporter's followers: per server, a ServerWatch that runs the
discovery query each interval and follows every new job it finds; per job, a
Followed that ticks the job's Monitor (the same one as `attach`), records its
samples, and keeps what the collector shows. A Followed reads the samples and
the Monitor's public standing (Monitor.standing), nothing inside it.

Per server and interval: one discovery query (the sample statement over
every database, with the drivers' own parts: one round trip) and, only when
it shows a session some driver claims that no followed job owns, one scan of
the host's processes (discover.find_jobs). A job the server runs itself (a
subscription's sync) is found from the same query (Driver.server_jobs),
with no scan. Each followed job costs what `attach` costs: its own
monitor connection and one sample per interval.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from typing import Any, Protocol

import psutil

from ..connect import ConnTarget
from ..discover import find_host_jobs, find_jobs
from ..jobs.base import Job
from ..jobs.registry import recognisers, sample_extras
from ..monitor import Monitor
from ..readers.db import DbSampler
from ..record import Recorder, RecordingError
from ..sample import Sample
from ..snapshot import DbSample
from ..source import HostSource, LiveSource, RecordingSource
from .collector import JobView, ServerView
from .journal import log

FAILURES_BEFORE_DROP = 60  # ticks in a row that raised: the job is no longer followed
RETRY_FOLLOW_S = 30.0  # a job that could not be followed is tried again after this


class Owner(Protocol):
    """What the followers ask of the exporter that runs them."""

    keep_ended_s: float  # an ended job stays in the series this long

    def new_recorder(self, started: float, server: str, job: Job) -> SafeRecorder | None: ...

    def recording_closed(self, path: str, drop: bool = False) -> None: ...

    def success(self, server: str, database: str, kind: str, when: float) -> None: ...


# ---- recordings that never raise ---------------------------------------------

class SafeRecorder:
    """A Recorder whose failures (a full disk, a directory gone) stop this
    recording instead of the exporter: counted, said once."""

    def __init__(self, path: str, on_error: Any) -> None:
        self.path = os.path.abspath(path)
        self.on_error = on_error
        self.rec: Recorder | None = None
        try:
            self.rec = Recorder(path)
        except RecordingError as exc:
            self._fail(str(exc))

    def _fail(self, why: str) -> None:
        log(f"recording {self.path} stopped: {why} (the job is still followed)")
        self.on_error()
        if self.rec is not None:
            with contextlib.suppress(Exception):
                self.rec.close()  # closes the file even when the disk is full
        self.rec = None

    def header(self, v: dict[str, Any]) -> None:
        if self.rec is not None:
            try:
                self.rec.header(v)
            except OSError as exc:
                self._fail(exc.strerror or str(exc))

    def event(self, kind: str, value: Any) -> None:
        if self.rec is not None:
            try:
                self.rec.event(kind, value)
            except OSError as exc:
                self._fail(exc.strerror or str(exc))

    def close(self) -> None:
        if self.rec is not None:
            try:
                self.rec.close()
            except OSError as exc:
                self._fail(exc.strerror or str(exc))
            self.rec = None


# ---- one followed job ---------------------------------------------------------

class Followed:
    """A job the exporter follows: its Monitor, its recording, and the view
    the collector shows."""

    def __init__(self, server: ServerWatch, job: Job, started: float,
                 recorder: SafeRecorder | None, host_only: bool = False) -> None:
        self.server = server
        self.recorder = recorder
        self.started = started
        live: LiveSource | HostSource
        if host_only:  # the server is down: a tool that runs so, from the host alone
            live = HostSource(job=job, why=f"{server.name} is down")
        else:
            live = LiveSource(server.target, job=job)
        source: Any = RecordingSource(live, recorder) if recorder is not None else live
        self.mon = Monitor(source)
        try:
            self.job = self.mon.discover()
        except Exception:
            live.close()
            raise
        self.tool = _tool(self.job)
        # before its first sample: the job's kind, running
        self.doc = Sample.from_json({"job": {"kind": self.job.kind, "state": "running"}})
        self.ended: float | None = None
        self.bytes_done = 0.0
        self.rows_done = 0.0
        self.progress = -1.0
        self.last_progress = started
        self.failures = 0
        self.claimed: set[int] = set(job.pid_hint)

    @property
    def running(self) -> bool:
        return self.ended is None

    def tick(self) -> None:
        try:
            doc = self.mon.tick()
        except Exception as exc:  # noqa: BLE001 - one job's trouble never stops the rest
            self.failures += 1
            self.server.errors += 1
            if self.failures == 1:
                log(f"{self.server.name}: sampling {self.job.describe()} failed: "
                    f"{type(exc).__name__}: {exc}")
            if self.failures >= FAILURES_BEFORE_DROP:
                self.end(note="the exporter could not sample it any more")
            return
        self.failures = 0
        self.doc = doc
        self.job = self.mon.job or self.job  # a job in steps: the step it follows now
        if self.recorder is not None:
            self.recorder.event("sample", doc.to_json())
        if doc.server.error:
            self.server.errors += 1
        st = self.mon.standing()
        if st is not None:
            if st.started is not None:
                self.started = st.started  # the job's start as its samples count it
            p = doc.job.progress
            moved = st.bytes_done > self.bytes_done or st.rows_done > self.rows_done or \
                (p is not None and p > self.progress)
            self.bytes_done = max(self.bytes_done, st.bytes_done)
            self.rows_done = max(self.rows_done, st.rows_done)
            if p is not None:
                self.progress = max(self.progress, float(p))
            if moved:
                self.last_progress = time.time()
            self.claimed |= st.sessions
        if (doc.job.state or "running") != "running":  # the Monitor's verdict
            self.end()

    def end(self, note: str | None = None) -> None:
        if self.ended is not None:
            return
        self.ended = time.time()
        if note and self.doc.job.state == "running":
            self.doc = replace(self.doc, job=replace(self.doc.job, state="ended"))
        state = self.doc.job.state
        why = self.doc.job.outcome or note
        log(f"{self.server.name}: {self.job.describe()} {state}{': ' + why if why else ''}")
        self.close()
        if state == "finished":
            self.server.exporter.success(self.server.name, self.database, self.job.kind,
                                         self.ended)

    def close(self) -> None:
        """The summary last, then the recording and the monitor's connection."""
        try:
            summary = self.mon.summary()
        except Exception:  # noqa: BLE001 - no tracker: nothing to summarise
            summary = None
        if self.recorder is not None:
            if summary is not None:
                self.recorder.event("summary", summary)
            self.recorder.close()
            self.server.exporter.recording_closed(self.recorder.path)
        with contextlib.suppress(Exception):
            self.mon.close()

    @property
    def database(self) -> str:
        return self.job.database or ""  # a physical backup: the whole cluster

    def view(self) -> JobView:
        return JobView(server=self.server.name, database=self.database, kind=self.job.kind,
                       tool=self.tool, doc=self.doc, started=self.started, ended=self.ended,
                       bytes_done=self.bytes_done, rows_done=self.rows_done,
                       last_progress=self.last_progress)


def _step_key(job: Job) -> tuple[object, ...]:
    """What the steps of one job in steps share (steps.py)."""
    return (job.kind, job.step_shell, job.database)


def _tool(job: Job) -> str:
    """The client program's name (bounded: the programs the drivers know,
    or a loader's own name, cut to 32 characters)."""
    if job.command:
        return os.path.basename(job.command[0])[:32] or job.kind
    return job.kind


def _server_job(job: Job) -> tuple[object, ...]:
    """A job the server runs itself, as the server knows it (its workers
    change as it goes)."""
    return (job.kind, job.database, job.subject)


def _job_start(job: Job, db: DbSample) -> float:
    """When the job started: its client process, else its first session."""
    if job.client_pid:
        try:
            return float(psutil.Process(job.client_pid).create_time())
        except (psutil.Error, OSError):
            pass
    starts = [b.backend_start for b in db.backends if b.pid in job.pid_hint and b.backend_start]
    return min(starts) if starts else time.time()


# ---- one server ----------------------------------------------------------------

class ServerWatch:
    def __init__(self, exporter: Owner, target: ConnTarget, name: str) -> None:
        self.exporter = exporter
        self.target = target
        self.name = name
        self.sampler = DbSampler(target, **sample_extras())
        self.up = False
        self.connected_once = False
        self.last_sample: float | None = None
        self.sample_seconds: float | None = None
        self.errors = 0
        self.jobs: list[Followed] = []
        self.retry: dict[tuple[object, ...], float] = {}  # jobs that could not be followed
        self.data_directory: str | None = None  # the server's, as last seen up

    def open(self) -> None:
        self.sampler.open()  # ConnectError: one line
        self.up = self.connected_once = True

    def sample_pass(self) -> None:
        t0 = time.perf_counter()
        for f in [f for f in self.jobs if f.running]:
            f.tick()
        db = self.sampler.sample(None)  # the discovery query: every database, one round trip
        if db.error:
            if self.up:
                log(f"{self.name}: {db.error}")
            self.up = False
            self.errors += 1
            self._discover_host()
        else:
            if not self.up and self.connected_once:
                log(f"{self.name}: connected again")
            self.up = self.connected_once = True
            self.last_sample = time.time()
            if self.sampler.facts is not None and self.sampler.facts.data_directory:
                self.data_directory = self.sampler.facts.data_directory
            self._discover(db)
        keep = self.exporter.keep_ended_s
        now = time.time()
        self.jobs = [f for f in self.jobs if f.ended is None or now - f.ended < keep]
        self.sample_seconds = time.perf_counter() - t0

    def _discover(self, db: DbSample) -> None:
        # sessions of running jobs never start a scan; an ended job's may be
        # a new run's (the same database, the next dump), so they do
        running: set[int] = set()
        claimed: set[int] = set()
        clients: set[int] = set()
        shells: set[tuple[object, ...]] = set()  # running jobs in steps: their shells
        for f in self.jobs:
            claimed |= f.claimed
            if f.running:
                running |= f.claimed
                if f.job.step_shell:
                    shells.add(_step_key(f.job))
            if f.job.client_pid:
                clients.add(f.job.client_pid)
        # the cheap part: is there any session some driver would claim that
        # no running job owns? Only then scan the host's processes. A job the
        # server runs itself is found from the query alone: one not followed
        # now is new (its workers come and go: it is known by what the
        # server calls it)
        ds = recognisers()
        facts = self.sampler.facts
        assert facts is not None
        new = [b for b in db.backends if b.pid not in running
               and any(d.session_key(b) is not None for d in ds)]
        subjects = {_server_job(f.job) for f in self.jobs if f.running and f.job.subject}
        served = [j for d in ds for j in d.server_jobs(db, facts)
                  if _server_job(j) not in subjects]
        if not new and not served:
            return
        try:
            jobs = find_jobs(facts, db, scan_processes=True) if new else served
        except Exception as exc:  # noqa: BLE001 - discovery trouble: next pass
            self.errors += 1
            log(f"{self.name}: discovery failed: {type(exc).__name__}: {exc}")
            return
        now = time.time()
        new_pids = {b.pid for b in new}
        for job in jobs:
            if job.subject:  # run by the server: the same subject is the same job
                if _server_job(job) in subjects:
                    continue
            elif job.client_pid:  # a process tree: the same tree is the same job, and
                # a running job's sessions are its own (found before its tree was)
                if job.client_pid in clients or job.pid_hint & running:
                    continue
                if job.step_shell and _step_key(job) in shells:
                    continue  # the next step of a running job in steps: its Monitor follows it
            elif job.pid_hint & claimed or not job.pid_hint & new_pids:
                continue  # sessions a followed job owns (or owned)
            key = (_server_job(job) if job.subject
                   else (job.kind, job.client_pid, tuple(sorted(job.pid_hint))))
            if self.retry.get(key, 0.0) > now:
                continue
            self._follow(job, db, key)
        self.retry = {k: t for k, t in self.retry.items() if t > now}

    def _discover_host(self) -> None:
        """The server is down: a tool that runs so (a pgBackRest restore of
        this server's data directory) is followed from the host alone. The
        process table is scanned only while the server is down."""
        try:
            jobs = find_host_jobs()
        except Exception as exc:  # noqa: BLE001 - discovery trouble: next pass
            self.errors += 1
            log(f"{self.name}: host discovery failed: {type(exc).__name__}: {exc}")
            return
        followed = {f.job.client_pid for f in self.jobs}
        now = time.time()
        for job in jobs:
            if job.client_pid in followed:
                continue
            if job.target and self.data_directory and \
                    os.path.realpath(job.target) != os.path.realpath(self.data_directory):
                continue  # another data directory: not this server's
            key = (job.kind, job.client_pid, ())
            if self.retry.get(key, 0.0) > now:
                continue
            self._follow(job, DbSample(), key, host_only=True)

    def _follow(self, job: Job, db: DbSample, key: tuple[object, ...],
                host_only: bool = False) -> None:
        started = _job_start(job, db)
        rec = self.exporter.new_recorder(started, self.name, job)
        try:
            f = Followed(self, job, started, rec, host_only=host_only)
        except Exception as exc:  # noqa: BLE001 - ConnectError, DiscoveryError, psycopg...
            self.errors += 1
            self.retry[key] = time.time() + RETRY_FOLLOW_S
            log(f"{self.name}: cannot follow {job.describe()}: {exc}")
            if rec is not None:
                rec.close()
                self.exporter.recording_closed(rec.path, drop=True)
            return
        self.jobs.append(f)
        log(f"{self.name}: following {f.job.describe()}"
            + (f", recording to {rec.path}" if rec is not None and rec.rec is not None else ""))
        f.tick()  # its series start from a real sample

    def view(self) -> ServerView:
        return ServerView(name=self.name, up=self.up, connected_once=self.connected_once,
                          last_sample=self.last_sample, sample_seconds=self.sample_seconds,
                          errors=self.errors, jobs=sum(1 for f in self.jobs if f.running))

    def close(self) -> None:
        for f in self.jobs:
            if f.running:
                f.ended = time.time()
                f.close()
        self.sampler.close()
