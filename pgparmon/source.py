"""Where a Monitor's inputs come from: the live server and host, or a
recording of them.

Every reading that the analysis depends on goes through a `Source` method
(nothing else in the Monitor reads the server, the host or the filesystem),
so a recording of those readings (RecordingSource) replays through the very
same analysis (ReplaySource) and reaches the same verdicts on any host.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
import time
from typing import Any, Protocol

import psycopg

from .client_tree import ClientPids, ClientTree
from .connect import ConnectError, ConnTarget, describe_target
from .discover import DiscoveryError, choose_job, find_host_jobs, find_jobs
from .exitcodes import ExitCode
from .jobs.base import TREE, Job, PlanInputs
from .jobs.job import StepLook
from .jobs.large_objects import LO_FILE, LO_FILES, LO_LIST
from .jobs.registry import job_extras, job_titles, plan_for, progress_for, recognise_for, \
    sample_extras
from .readers import devices as devmod
from .readers import host as hostmod
from .readers import procs
from .readers.db import DbSampler, ServerFacts, host_only_facts
from .redact import redact_argv, redact_text
from .snapshot import FileSize, Snapshot
from .steps import chain_of, next_step, resolved
from .toc import TocError


class Source(Protocol):
    """The readings a Monitor works from, in the order it asks for them."""

    facts: ServerFacts
    job: Job | None
    target_dir: str | None  # the job's output directory or archive, resolved
    devices: set[str]  # block devices the job loads

    def discover(self) -> Job: ...

    def snapshot(self) -> Snapshot: ...

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs | None: ...

    def catalog_done(self, database: str | None = None) -> dict[str, Any]: ...

    def final_files(self) -> tuple[FileSize, ...] | None: ...

    def may_ask_again(self, kind: str) -> bool: ...

    def pause(self, seconds: float) -> None: ...

    def details(self, pid: int, client_pid: int | None) -> dict[str, Any]: ...

    def next_step(self, job: Job) -> StepLook: ...

    def follow_step(self, job: Job) -> None: ...

    def close(self) -> None: ...


LINK_TRIES = 5  # ticks a session that links to no visible process is looked up again
# ticks between two looks for the idle sessions of a tool that names none
# (Driver.idle_sessions) while none of them has been found
IDLE_LOOKUP_EVERY = 5


class LiveSource:
    """Reads the server (one round trip per snapshot), the host and the job's
    client processes."""

    def may_ask_again(self, kind: str) -> bool:
        return True

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)

    @property
    def client_pids(self) -> ClientPids:
        """The job's client processes' keeper (client_tree.ClientPids), the
        one the Monitor's Tracker and job's end ask too."""
        return self.clients.pids

    def __init__(self, target: ConnTarget, job: Job | None = None, pid: int | None = None,
                 process: subprocess.Popen[Any] | None = None,
                 log: str | None = None, copy_source: ConnTarget | None = None) -> None:
        self.target = target
        self.copy_source = copy_source  # --source: a COPY job's source server
        self.log = log  # where the job we started writes its output
        self.sampler = DbSampler(target, **sample_extras())
        self.facts: ServerFacts = self.sampler.open()
        self.local = procs.server_is_local(self.facts.backend_pid)
        self.job = job
        self.pid = pid
        self.process = process
        self.target_dir: str | None = None
        self._dir_watch: DirWatch | None = None  # the target's files, at a bounded cost
        self._planning: _Background | None = None  # a plan's reading under way
        self._root_gone = False  # the job's leader seen gone (the last snapshot)
        self.devices: set[str] = set()
        self.clients = ClientTree(ClientPids(None), process, log)  # set at discovery
        self.known_backends: set[int] = set()  # the job's sessions seen so far
        self.snapshots_taken = 0
        # a session's client never changes: (pid, backend_start) -> client pid,
        # looked up once; one that cannot be linked is tried LINK_TRIES times
        self._links: dict[tuple[int, float | None], int] = {}
        self._link_tries: dict[tuple[int, float | None], int] = {}
        self._peers_ok = True
        self._tool: dict[str, Any] | None = None  # the tool's own status, last read
        self._seek_idle = False  # look up the job's idle sessions (Driver.idle_sessions)

    # ---- the job ----------------------------------------------------------

    def discover(self) -> Job:
        if self.job is None:
            # --pid: its tree's sessions are sampled even when idle between batches
            hint = (sorted(procs.job_backends_of(self.pid, self.facts.port))
                    if self.pid is not None else None)
            db = self.sampler.sample(hint)
            if db.error:
                raise DiscoveryError(db.error, ExitCode.CONNECT)
            jobs = find_jobs(self.facts, db, scan_processes=True, pid=self.pid)
            try:
                self.job = choose_job(jobs, self.pid)
            except DiscoveryError as exc:
                if exc.jobs:  # several: the list attach shows (picker, JSON)
                    from .pick import found_jobs

                    exc.found = found_jobs(exc.jobs, db)
                raise
        job = self.job
        driver = recognise_for(job.kind)
        # the job is known: its samples read its driver's parts and server
        # types alone (a dump's runs no subscription query)
        self.sampler.read_extras(**job_extras(job.kind))
        if job.database is None and not driver.whole_cluster:
            job = self.job = dataclasses.replace(job, database=self.facts.database)
        if job.database is not None and job.database != self.facts.database:
            self.sampler.close()
            self.sampler = DbSampler(self.target.with_dbname(job.database or ""),
                                     **job_extras(job.kind))
            try:
                self.facts = self.sampler.open()
            except Exception as exc:  # noqa: BLE001 - one line to the user
                raise DiscoveryError(f"found {job.describe()} but cannot connect to its "
                                     f"database: {exc}", ExitCode.CONNECT) from None
        if self.copy_source is not None and driver.names_source and job.source is None:
            job = self.job = dataclasses.replace(job, source=describe_target(self.copy_source))
        # a physical backup's sessions have no database: its walsenders are
        # sampled whatever the filter, client sessions of the monitor's own
        self.sampler.backup_bands = driver.whole_cluster
        self.sampler.database_filter = None if driver.all_databases else \
            (job.database or self.facts.database)
        self.target_dir = self._resolve_target(job)
        self.known_backends = set(job.pid_hint)
        self.clients = ClientTree.of(job, job.grouping == TREE, self.process, self.log)
        self._seek_idle = (driver.idle_sessions and job.grouping == TREE
                           and bool(job.client_pid) and self.local)
        if self._seek_idle:
            self._idle_sessions()
        self._find_devices()
        return job

    def next_step(self, job: Job) -> StepLook:
        """The next step of a job in steps its shell started (steps.py)."""
        return next_step(job, self.target_dir)

    def follow_step(self, job: Job) -> None:
        """Follow the next step of the job: its process tree from now on."""
        self.job = job
        self.known_backends |= set(job.pid_hint)
        self.clients = ClientTree.of(job, job.grouping == TREE, self.process, self.log)
        self._tool = None
        # a reading still going on was asked for the last step: the next
        # plan_inputs reads this one's (the old thread's result is dropped)
        self._planning = None

    def look_again(self) -> None:
        """Forget the job found and undo what following it set (the sampler
        filtered to its database, without the bands only a backup needs,
        reading its driver's parts alone): the next discover looks at every
        session, with every driver's parts (attach --wait's second look)."""
        self.job = None
        self.sampler.database_filter = None
        self.sampler.backup_bands = True
        self.sampler.read_extras(**sample_extras())

    def _idle_sessions(self) -> None:
        """A tool whose own session sits idle under no application_name of
        its own (pg_probackup's): its process tree's sessions, found from
        the client side of their sockets, are sampled even while idle."""
        self.known_backends |= procs.tree_backends(self.clients.pids.live_tree, self.facts.port,
                                                   procs.unix_peers())

    def header(self) -> dict[str, Any]:
        assert self.job is not None
        return {"job": self.job.to_dict(), "facts": dataclasses.asdict(self.facts),
                "target_dir": self.target_dir, "devices": sorted(self.devices),
                "local": self.local}

    def _resolve_target(self, job: Job) -> str | None:
        return resolved(job.target, job.client_pid)

    def _find_devices(self) -> None:
        for p in (self.target_dir, self.facts.data_directory if self.local else None):
            if not p:
                continue
            probe = p if os.path.exists(p) else os.path.dirname(p)
            try:
                d = devmod.device_for_path(probe)
            except OSError:
                d = None
            if d:
                self.devices.add(d)
                w = devmod.whole_disk(d)
                if w:
                    self.devices.add(w)

    # ---- per tick -----------------------------------------------------------

    def snapshot(self) -> Snapshot:
        job = self.job
        assert job is not None
        driver, obs = recognise_for(job.kind), progress_for(job.kind)
        tree = job.grouping == TREE and bool(job.client_pid)
        db = self.sampler.sample(sorted(self.known_backends))
        host = hostmod.read_host(self.devices or None, devmod.rotational_of(self.devices))
        now = self.clients.read(tree)
        self._root_gone = now.root_alive is False
        clients = procs.read_procs(now.live, files_under=self.target_dir or "/")
        backends = db.backends if not db.error else ()
        links: tuple[tuple[int, int], ...] | None = None
        if tree and not db.error:
            pairs = self._backend_links(backends)
            mine = self.clients.pids.live_tree | set(now.live)
            found = tuple(sorted((b, c) for b, c in pairs.items() if c in mine))
            # no `ss` and no TCP link: unknown (the sessions seen at discovery
            # stay the job's), not "no session"
            links = found if found or self._peers_ok else None
            self.known_backends |= {b for b, _ in found}
        elif driver.joins_sessions_live and not db.error:
            self.known_backends |= {b.pid for b in backends if driver.belongs(job, b)}
        if self._seek_idle and tree and self.snapshots_taken % IDLE_LOOKUP_EVERY == 0 \
                and not any(b.backend_type == "client backend" and b.pid in self.known_backends
                            for b in backends):
            self._idle_sessions()  # not found yet (opened after discovery): look again
        backend_pids = [b.pid for b in backends]
        backends_os = procs.read_procs(backend_pids) if self.local else ()
        files: tuple[FileSize, ...] = ()
        if (self.target_dir and obs.writes_target_files
                and os.path.isdir(self.target_dir)):
            if self._dir_watch is None or self._dir_watch.path != self.target_dir:
                self._dir_watch = DirWatch(self.target_dir)
            files = self._dir_watch.read(f.path for c in clients
                                         for f in c.open_files or ()) or ()
        elif tree:
            files = input_sizes(clients)
        self.snapshots_taken += 1
        tool = obs.read_status(job, clients, self._tool) if job.client_pid else None
        self._tool = tool or self._tool
        # the free space where the job writes: its target, or where the tool
        # says it writes (a pgBackRest backup's directory in its repository)
        free = free_space(self.target_dir or (self._tool or {}).get("backup_dir"))
        return Snapshot(ts=time.monotonic(), wall=time.time(), db=db, host=host, clients=clients,
                        backends_os=backends_os, files=files, free_bytes=free,
                        root_alive=now.root_alive, exit_code=now.exit_code,
                        exit_error=now.exit_error, links=links, tool=tool)

    def _backend_links(self, backends: Any) -> dict[int, int]:
        """backend pid -> its client process, for every session linked so
        far. The socket tables (`ss`, the host's TCP connections: several ms
        each) are read only on a tick where a session is new, not every tick."""
        keyed = {(b.pid, b.backend_start): b for b in backends}
        todo = [k for k in keyed if k not in self._links
                and self._link_tries.get(k, 0) < LINK_TRIES]
        if todo:
            peers = procs.unix_peers()
            self._peers_ok = peers is not None
            pairs = procs.backend_clients(self.facts.port, keyed.values(), peers)
            for k in todo:
                if k[0] in pairs:
                    self._links[k] = pairs[k[0]]
                else:
                    self._link_tries[k] = self._link_tries.get(k, 0) + 1
        for gone in [k for k in self._links if k not in keyed]:
            del self._links[gone]
        for gone in [k for k in self._link_tries if k not in keyed]:
            del self._link_tries[gone]
        return {k[0]: c for k, c in self._links.items()}

    # ---- planning inputs ------------------------------------------------------

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs | None:
        """What the work list is built from; None: not available yet (a dump's
        toc.dat is written just after it starts, or its reading goes on).
        A reading that takes longer than PLAN_WAIT_S (an archive of a million
        large objects is a million TOC lines; a catalog of 100,000 tables)
        goes on in a thread of its own while the samples go on, and is
        handed over at the first call after it ends: a recording keeps a
        None for each call before, as for a TOC not written yet."""
        assert self.job is not None
        if self._planning is None:
            req = dict(req or {})
            if self.job.step_shell:  # a job in steps: every step its shell runs, when it says
                req["chain"] = chain_of(self.job, self.target_dir)
            self._planning = _Background(lambda: self._read_plan(req))
        # the job gone: its end's figures need the plan, so it is waited for
        if not self._planning.wait(PLAN_END_WAIT_S if self._root_gone else PLAN_WAIT_S):
            return None
        done, self._planning = self._planning, None
        return done.result()

    def _read_plan(self, req: dict[str, Any]) -> PlanInputs | None:
        assert self.job is not None
        try:
            return plan_for(self.job.kind).read_plan(self, req)
        except TocError as exc:
            return PlanInputs(error=f"cannot read the archive's TOC ({exc}): progress from "
                                    "activity only")
        except psycopg.Error as exc:
            conn = self.sampler.conn
            if conn is None or conn.closed or conn.broken:
                return None  # the connection is down: read again once the samples reconnect
            return PlanInputs(error=f"cannot read table sizes: {_one_line(exc)}")

    def query_json(self, name: str) -> Any:
        return self.sampler.query_json(name)

    def query_json_on(self, database: str, name: str) -> Any:
        """A one-off catalog query on another database of this server (a
        copy's source): a short-lived monitor connection, with the same
        read-only session and timeouts."""
        if database == self.facts.database:
            return self.sampler.query_json(name)
        return _one_off(self.target.with_dbname(database), (name,))[0][0]

    def source_catalog(self, database: str | None) -> tuple[Any, Any, str | None]:
        if database is not None:
            ddir = self.facts.data_directory if self.local else None
            return (self.query_json_on(database, "tables"),
                    self.query_json_on(database, "postdata"), ddir)
        if self.copy_source is None:
            raise psycopg.OperationalError("no --source server was given")
        (tables, post), facts = _one_off(self.copy_source, ("tables", "postdata"))
        local = procs.server_is_local(facts.backend_pid)
        return tables, post, facts.data_directory if local else None

    def client_binary(self, name: str) -> str | None:
        """The job's own client program of that name (same version), else PATH's."""
        job = self.job
        if job and job.command:
            d = os.path.dirname(job.command[0])
            if d and os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
        return shutil.which(name)

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        try:
            if database:
                return self.query_json_on(database, "done") or {}
            return self.sampler.query_json("done") or {}
        except psycopg.Error:
            return {}

    def final_files(self) -> tuple[FileSize, ...] | None:
        """The target directory's files now; None when this user cannot list
        it (another OS user's 0700 directory, or one never created)."""
        return dir_sizes(self.target_dir) if self.target_dir else ()

    def details(self, pid: int, client_pid: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": pid, "locks": [], "client": None, "error": None}
        try:
            out["locks"] = self.sampler.query_json("locks", {"pid": pid}) or []
        except psycopg.Error as exc:
            out["error"] = _one_line(exc)
        if client_pid:
            try:
                import psutil

                p = psutil.Process(client_pid)
                out["client"] = {"pid": client_pid, "cmdline": redact_argv(p.cmdline()),
                                 "status": p.status(), "user": p.username()}
            except Exception:  # noqa: BLE001 - gone, or another user's process
                out["client"] = {"pid": client_pid}
        return out

    def close(self) -> None:
        self.sampler.close()


class HostSource:
    """Reads the host alone, with no database connection: a job that runs
    while the server is down (a pgBackRest restore). Its processes, their
    open files, the host's CPU and disks, and the tool's own status."""

    local = True

    def __init__(self, job: Job | None = None, pid: int | None = None,
                 process: subprocess.Popen[Any] | None = None, log: str | None = None,
                 why: str | None = None) -> None:
        self.job = job
        self.pid = pid
        self.process = process
        self.log = log
        self.why = why  # how it came to be host only (said once)
        self.facts: ServerFacts = host_only_facts()
        self.target_dir: str | None = None
        self.devices: set[str] = set()
        self.clients = ClientTree(ClientPids(None), process, log)  # set at discovery
        self.snapshots_taken = 0
        self._tool: dict[str, Any] | None = None

    def may_ask_again(self, kind: str) -> bool:
        return True

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)

    @property
    def client_pids(self) -> ClientPids:
        return self.clients.pids

    def look_again(self) -> None:
        self.job = None

    def discover(self) -> Job:
        if self.job is None:
            jobs = find_host_jobs(self.pid)
            if not jobs:
                raise DiscoveryError(
                    f"no {job_titles(host_only=True)} running on this host" + (
                        f" with pid {self.pid}" if self.pid is not None else "")
                    + " (--host-only follows tools that run with the server down; without "
                    "it, attach finds the jobs of a running server)", ExitCode.NO_JOB)
            self.job = choose_job(jobs, self.pid, host_only=True)
        job = self.job
        self.facts = host_only_facts(job.target)
        self.target_dir = job.target
        self.clients = ClientTree.of(job, True, self.process, self.log)
        if self.target_dir:
            probe = self.target_dir
            while probe and not os.path.exists(probe):
                probe = os.path.dirname(probe)
            try:
                d = devmod.device_for_path(probe or "/")
            except OSError:
                d = None
            if d:
                self.devices |= {d, *([w] if (w := devmod.whole_disk(d)) else [])}
        return job

    def header(self) -> dict[str, Any]:
        assert self.job is not None
        return {"job": self.job.to_dict(), "facts": dataclasses.asdict(self.facts),
                "target_dir": self.target_dir, "devices": sorted(self.devices),
                "local": True}

    def snapshot(self) -> Snapshot:
        job = self.job
        assert job is not None
        obs = progress_for(job.kind)
        host = hostmod.read_host(self.devices or None, devmod.rotational_of(self.devices))
        now = self.clients.read(True)
        clients = procs.read_procs(now.live, files_under="/")
        tool = obs.read_status(job, clients, self._tool) if job.client_pid else None
        self._tool = tool or self._tool
        if tool and tool.get("pgdata") and not self.target_dir:
            self.target_dir = tool["pgdata"]
        free = free_space(self.target_dir)
        self.snapshots_taken += 1
        return Snapshot(ts=time.monotonic(), wall=time.time(), db=None, host=host,
                        clients=clients, backends_os=(), files=(), free_bytes=free,
                        root_alive=now.root_alive, exit_code=now.exit_code,
                        exit_error=now.exit_error, links=None, tool=tool)

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs | None:
        return PlanInputs()

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        return {}

    def final_files(self) -> tuple[FileSize, ...] | None:
        return None

    def details(self, pid: int, client_pid: int | None) -> dict[str, Any]:
        return {"pid": pid, "locks": [], "client": None,
                "error": "host only: no server to ask for locks"}

    def next_step(self, job: Job) -> StepLook:
        return StepLook()  # its tools run in no steps

    def follow_step(self, job: Job) -> None:
        self.job = job

    def close(self) -> None:
        pass


class RecordingSource:
    """A LiveSource whose every reading is also written to a recording."""

    def __init__(self, live: LiveSource | HostSource, recorder: Any) -> None:
        self.live = live
        self.recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.live, name)

    def discover(self) -> Job:
        job = self.live.discover()
        self.recorder.header(self.live.header())
        return job

    def snapshot(self) -> Snapshot:
        snap = self.live.snapshot()
        self.recorder.event("snapshot", snap.to_dict())
        return snap

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs | None:
        v = self.live.plan_inputs(req)
        self.recorder.event("plan", v.to_dict() if v is not None else None)
        return v

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        v = self.live.catalog_done(database)
        self.recorder.event("done", v)
        return v

    def final_files(self) -> tuple[FileSize, ...] | None:
        v = self.live.final_files()
        self.recorder.event("files", None if v is None else [dataclasses.asdict(f) for f in v])
        return v

    def next_step(self, job: Job) -> StepLook:
        v = self.live.next_step(job)
        self.recorder.event("step", v.to_dict())
        return v

    def close(self) -> None:
        self.live.close()


def _one_off(target: ConnTarget, names: tuple[str, ...]) -> tuple[list[Any], ServerFacts]:
    """Catalog queries on a short-lived monitor connection (read-only, the
    same timeouts): another database of the server, or a copy's source
    server. Connection failures come as psycopg errors (said once)."""
    other = DbSampler(target)
    try:
        facts = other.open()
        return [other.query_json(n) for n in names], facts
    except ConnectError as exc:
        raise psycopg.OperationalError(str(exc)) from None
    finally:
        other.close()


def free_space(path: str | None) -> int | None:
    """Free bytes on the filesystem of a path (of its nearest existing
    parent: a target not created yet)."""
    if not path:
        return None
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        return shutil.disk_usage(probe or "/").free
    except OSError:
        return None


def dir_sizes(path: str) -> tuple[FileSize, ...] | None:
    """The files of a directory and their sizes; None when it cannot be read
    (another OS user's 0700 dump directory). A dump's large-object files
    are counted in one entry (`LO_FILES`), by their names alone: they name
    no item, and one entry each, stat'ed, cost every sample and every
    recorded one their number (100,000 of them: 0.7 s and 5.9 MB of JSON a
    sample)."""
    out = []
    lo_files = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.name.startswith("blob_") and LO_FILE.match(e.name):
                    lo_files += 1
                    continue
                try:
                    out.append(FileSize(e.path, e.stat().st_size))
                except OSError:
                    continue
    except OSError:
        return None
    if lo_files:
        out.append(FileSize(os.path.join(path, LO_FILES), lo_files))
    return tuple(sorted(out, key=lambda f: f.path))


# how long a sample waits for the plan's reading before going on without it
# (LiveSource.plan_inputs)
PLAN_WAIT_S = 0.25
# and once the job is gone, how long at most (its end is told with the plan)
PLAN_END_WAIT_S = 120.0


class _Background:
    """A call run in a daemon thread (the monitor's exit never waits for it),
    its result or exception kept for the caller."""

    def __init__(self, fn: Any) -> None:
        self._fn = fn
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, name="pgparmon-plan", daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self._error = exc
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


# a listing of the job's directory costs at most this share of the time
# between two listings (DirWatch)
LISTING_SHARE = 0.05


class DirWatch:
    """A dump directory's files, a sample each, at a bounded cost. Listing
    the directory is one getdents a few dozen names, and a database of a
    million large objects is a million files (0.7 s a listing here, more
    than a sample's whole budget): a full listing is made only once its
    cost is under LISTING_SHARE of the time since the last one. Between two,
    the files it found and any a client has had open since are stat'ed
    again, and the objects' files counted from their lists' growth (one line
    an object written, at the mean line of the last listing). A directory
    of a few thousand files is listed every sample, as before."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.known: dict[str, None] = {}  # paths, in order (no LO files)
        self.at = 0.0  # when the last full listing was made (monotonic)
        self.cost = 0.0  # what it took
        self.objects = 0  # the LO files it counted
        self.list_bytes = 0  # and their lists' bytes then

    def read(self, open_paths: Any = ()) -> tuple[FileSize, ...] | None:
        now = time.monotonic()
        prefix = os.path.join(self.path, "")
        for p in open_paths:
            if p.startswith(prefix) and not LO_FILE.match(os.path.basename(p)):
                self.known.setdefault(p, None)
        if not self.at or (now - self.at) * LISTING_SHARE >= self.cost:
            t0 = time.perf_counter()
            files = dir_sizes(self.path)
            self.cost = time.perf_counter() - t0
            self.at = now
            if files is None:
                self.known.clear()
                return None
            self.known = {f.path: None for f in files if not _lo_entry(f.path)}
            self.objects = next((f.size for f in files if _lo_entry(f.path)), 0)
            self.list_bytes = _list_bytes(files)
            return files
        out = []
        for p in list(self.known):
            try:
                out.append(FileSize(p, os.stat(p).st_size))
            except OSError:
                del self.known[p]
        objects = self.objects
        if self.objects and self.list_bytes:
            grown = _list_bytes(out) - self.list_bytes
            objects += max(0, round(grown * self.objects / self.list_bytes))
        if objects:
            out.append(FileSize(os.path.join(self.path, LO_FILES), objects))
        return tuple(sorted(out, key=lambda f: f.path))


def _lo_entry(path: str) -> bool:
    return os.path.basename(path) == LO_FILES


def _list_bytes(files: Any) -> int:
    return sum(f.size for f in files if LO_LIST.match(os.path.basename(f.path)))


def input_sizes(clients: Any) -> tuple[FileSize, ...]:
    """Sizes of the files a loader's processes read their data from."""
    out: dict[str, int] = {}
    for c in clients:
        for f in c.open_files or ():
            if f.path not in out and procs.is_input_file(f):
                try:
                    out[f.path] = os.stat(f.path).st_size
                except OSError:
                    continue
    return tuple(FileSize(p, n) for p, n in sorted(out.items()))


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return redact_text(lines[0] if lines else type(exc).__name__)
