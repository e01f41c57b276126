"""`pgparmon exporter`: a long-running process that watches one or more
servers and the host, follows every job it discovers with the same Monitor
as `attach`, records each one, and serves /metrics (collector.py).

Per server and interval: one discovery query (the sample statement over
every database, one round trip) and, only when it shows a session some
driver claims that no followed job owns, one scan of the host's processes
(discover.find_jobs). Each followed job costs what `attach` costs: its own
monitor connection and one sample per interval.
"""

from __future__ import annotations

import contextlib
import getpass
import ipaddress
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import psutil
import psycopg
from psycopg import conninfo as pgconninfo

from ..connect import ConnectError, ConnTarget, build_conninfo
from ..discover import find_host_jobs, find_jobs
from ..exitcodes import ExitCode, Fatal
from ..jobs.base import Job
from ..jobs.registry import drivers
from ..monitor import Monitor
from ..private import make_private_dirs, open_private, open_to_others
from ..readers.db import DbSampler
from ..record import Recorder, RecordingError
from ..redact import redact_text
from ..snapshot import DbSample
from ..source import HostSource, LiveSource, RecordingSource
from . import retention
from .collector import JobView, ServerView, State

SUCCESS_FILE = "last-success.json"
FAILURES_BEFORE_DROP = 60  # ticks in a row that raised: the job is no longer followed
RETRY_FOLLOW_S = 30.0  # a job that could not be followed is tried again after this
PRUNE_EVERY_S = 60.0


def log(msg: str) -> None:
    """One line on stderr (the journal), redacted."""
    sys.stderr.write(f"pgparmon exporter: {' '.join(redact_text(msg).split())}\n")
    sys.stderr.flush()


# ---- names ------------------------------------------------------------------

def server_name(t: ConnTarget) -> str:
    """A stable, redacted name for a server: host:port/database as libpq
    would resolve them (PG* variables included), a unix socket's directory
    as `local`, a service as its name. Raises ValueError on a malformed
    conninfo."""
    try:
        params = pgconninfo.conninfo_to_dict(build_conninfo(t))
    except psycopg.ProgrammingError as exc:
        raise ValueError(str(exc).strip().splitlines()[0] if str(exc).strip() else
                         "malformed") from None
    env = os.environ
    service = params.get("service") or env.get("PGSERVICE")
    host = str(params.get("host") or params.get("hostaddr") or env.get("PGHOST") or "")
    port = str(params.get("port") or env.get("PGPORT") or "5432")
    user = params.get("user") or env.get("PGUSER") or getpass.getuser()
    db = str(params.get("dbname") or env.get("PGDATABASE") or user)
    if service and not host:
        return redact_text(f"{service}/{db}")
    host = host.split(",")[0]
    if not host or host.startswith("/") or host.startswith("@"):
        host = "local"
    return redact_text(f"{host}:{port}/{db}")


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
                self.rec.close()
            with contextlib.suppress(Exception):
                self.rec._raw.close()
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
        self.doc: dict[str, Any] = {"job": {"kind": self.job.kind, "state": "running"}}
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
        if self.recorder is not None:
            self.recorder.event("sample", doc)
        if doc.get("server", {}).get("error"):
            self.server.errors += 1
        tr = self.mon.tracker
        now = time.time()
        if tr is not None and tr.started is not None and tr.started_from != "first sample":
            self.started = tr.started  # the job's start as its samples count it
        if tr is not None:
            b = float(sum(i.bytes_done for i in tr.items.values()))
            r = float(sum(i.tuples_done for i in tr.items.values()))
            p = doc["job"].get("progress")
            moved = b > self.bytes_done or r > self.rows_done or \
                (p is not None and p > self.progress)
            self.bytes_done = max(self.bytes_done, b)
            self.rows_done = max(self.rows_done, r)
            if p is not None:
                self.progress = max(self.progress, float(p))
            if moved:
                self.last_progress = now
            snap = self.mon.snaps[-1] if self.mon.snaps else None
            if snap is not None and snap.db is not None and not snap.db.error:
                self.claimed |= {m.pid for m in tr.members(snap)}
            self.claimed |= set(tr.workers)
        if self.mon.outcome is not None:
            self.end()

    def end(self, note: str | None = None) -> None:
        if self.ended is not None:
            return
        self.ended = time.time()
        if note and self.doc.get("job", {}).get("state") == "running":
            self.doc = {**self.doc, "job": {**self.doc.get("job", {}), "state": "ended"}}
        state = self.doc.get("job", {}).get("state")
        out = self.mon.outcome
        log(f"{self.server.name}: {self.job.describe()} {state}"
            f"{': ' + out.reason if out else (': ' + note if note else '')}")
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


def _tool(job: Job) -> str:
    """The client program's name (bounded: the programs the drivers know,
    or a loader's own name, cut to 32 characters)."""
    if job.command:
        return os.path.basename(job.command[0])[:32] or job.kind
    return job.kind


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
    def __init__(self, exporter: Exporter, target: ConnTarget, name: str) -> None:
        self.exporter = exporter
        self.target = target
        self.name = name
        self.sampler = DbSampler(target)
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
        for f in self.jobs:
            claimed |= f.claimed
            if f.running:
                running |= f.claimed
            if f.job.client_pid:
                clients.add(f.job.client_pid)
        # the cheap part: is there any session some driver would claim that
        # no running job owns? Only then scan the host's processes.
        ds = drivers()
        new = [b for b in db.backends if b.pid not in running
               and any(d.session_key(b) is not None for d in ds)]
        if not new:
            return
        facts = self.sampler.facts
        assert facts is not None
        try:
            jobs = find_jobs(facts, db, scan_processes=True)
        except Exception as exc:  # noqa: BLE001 - discovery trouble: next pass
            self.errors += 1
            log(f"{self.name}: discovery failed: {type(exc).__name__}: {exc}")
            return
        now = time.time()
        new_pids = {b.pid for b in new}
        for job in jobs:
            if job.client_pid:  # a process tree: the same tree is the same job, and
                # a running job's sessions are its own (found before its tree was)
                if job.client_pid in clients or job.pid_hint & running:
                    continue
            elif job.pid_hint & claimed or not job.pid_hint & new_pids:
                continue  # sessions a followed job owns (or owned)
            key = (job.kind, job.client_pid, tuple(sorted(job.pid_hint)))
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


# ---- the exporter ----------------------------------------------------------------

@dataclass(frozen=True)
class Options:
    targets: tuple[ConnTarget, ...]
    names: tuple[str, ...] = ()
    listen: str = "127.0.0.1:9752"
    web_config: str | None = None  # the exporter toolkit's web configuration file
    interval: float = 1.0
    record_dir: str | None = None
    retain_age_s: float | None = 14 * 86400.0
    retain_bytes: int | None = 1 << 30
    keep_ended_s: float = 600.0


class Exporter:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.keep_ended_s = opts.keep_ended_s
        self.started = time.time()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.servers: list[ServerWatch] = []
        self.last_success: dict[tuple[str, str, str], float] = {}
        self.recording_errors = 0
        self.retention_deleted = 0
        self.open_recordings: set[str] = set()
        self.usage: retention.DirUsage | None = None
        self._state = State(started=self.started, recordings_dir=opts.record_dir)
        self._last_prune = 0.0
        self.httpd: Any = None

    # -- state for the collector (read by the HTTP thread) --

    def state(self) -> State:
        with self.lock:
            return self._state

    def publish(self) -> None:
        st = State(servers=tuple(s.view() for s in self.servers),
                   jobs=tuple(f.view() for s in self.servers for f in s.jobs),
                   last_success=dict(self.last_success), started=self.started,
                   recordings_dir=self.opts.record_dir,
                   recordings_bytes=self.usage.bytes if self.usage else None,
                   recordings_files=self.usage.files if self.usage else None,
                   recording_errors=self.recording_errors,
                   retention_deleted=self.retention_deleted)
        with self.lock:
            self._state = st

    # -- recordings --

    def new_recorder(self, started: float, server: str, job: Job) -> SafeRecorder | None:
        d = self.opts.record_dir
        if not d:
            return None
        path = os.path.join(d, retention.recording_name(started, server, job.kind,
                                                        job.database, job.client_pid))
        self.open_recordings.add(os.path.abspath(path))
        rec = SafeRecorder(path, self._recording_error)
        return rec

    def _recording_error(self) -> None:
        self.recording_errors += 1

    def recording_closed(self, path: str, drop: bool = False) -> None:
        self.open_recordings.discard(os.path.abspath(path))
        if drop:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.prune()

    def prune(self) -> None:
        d = self.opts.record_dir
        if not d:
            return
        self._last_prune = time.monotonic()
        deleted, failed = retention.prune(d, self.opts.retain_age_s, self.opts.retain_bytes,
                                          self.open_recordings)
        self.retention_deleted += deleted
        self.recording_errors += failed
        self.usage = retention.usage(d)

    def success(self, server: str, database: str, kind: str, when: float) -> None:
        self.last_success[(server, database, kind)] = when
        d = self.opts.record_dir
        if not d:
            return
        doc = {"\t".join(k): v for k, v in self.last_success.items()}
        tmp = os.path.join(d, f".{SUCCESS_FILE}.tmp")
        try:
            with open_private(tmp, text=True) as f:
                json.dump(doc, f)
            os.replace(tmp, os.path.join(d, SUCCESS_FILE))
        except OSError as exc:
            self.recording_errors += 1
            log(f"cannot save {SUCCESS_FILE} in {d}: {exc.strerror or exc}")
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def load_success(self) -> None:
        d = self.opts.record_dir
        if not d:
            return
        try:
            with open(os.path.join(d, SUCCESS_FILE), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return
        for k, v in (doc.items() if isinstance(doc, dict) else ()):
            parts = tuple(str(k).split("\t"))
            if len(parts) == 3 and isinstance(v, (int, float)):
                self.last_success[(parts[0], parts[1], parts[2])] = float(v)

    # -- the loop --

    def run(self) -> int:
        nxt = time.monotonic()
        while not self.stop.is_set():
            for s in self.servers:
                if self.stop.is_set():
                    break
                try:
                    s.sample_pass()
                except Exception as exc:  # noqa: BLE001 - one server's trouble stops nothing
                    s.errors += 1
                    s.up = False
                    log(f"{s.name}: sampling failed: {type(exc).__name__}: {exc}")
            if self.opts.record_dir and time.monotonic() - self._last_prune > PRUNE_EVERY_S:
                self.prune()
            self.publish()
            nxt += self.opts.interval
            delay = nxt - time.monotonic()
            if delay < 0:  # a slow pass: stretch instead of piling up
                nxt = time.monotonic()
                delay = 0.0
            self.stop.wait(delay)
        return ExitCode.OK

    def shutdown(self) -> None:
        """End every followed job's recording (summary last) and close the
        connections; stop serving."""
        for s in self.servers:
            s.close()
        self.publish()
        if self.httpd is not None:
            with contextlib.suppress(Exception):
                self.httpd.shutdown()
                self.httpd.server_close()


# ---- the command ---------------------------------------------------------------

def _listen(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        p = int(port)
    except ValueError:
        raise Fatal(f"--listen {addr!r}: give HOST:PORT, e.g. 127.0.0.1:9752",
                    ExitCode.USAGE) from None
    if not 0 <= p <= 65535:
        raise Fatal(f"--listen {addr!r}: the port must be 0-65535", ExitCode.USAGE)
    return host, p


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_record_dir(d: str) -> None:
    """The recordings directory exists (or is made, 0700 with the parents
    it needs) and we can write, list and delete files in it. An existing
    one keeps its mode: a warning when every user can list it."""
    try:
        made = make_private_dirs(d)
        probe = os.path.join(d, f".pgparmon-probe-{os.getpid()}")
        with open_private(probe) as f:
            f.write(b"x")
        os.unlink(probe)
        os.listdir(d)
    except OSError as exc:
        raise Fatal(f"cannot use the recordings directory {d}: {exc.strerror or exc} (give "
                    "--record-dir a directory this user can write)", ExitCode.USAGE) from None
    mode = None if made else open_to_others(d)
    if mode is not None:
        log(f"the recordings directory {d} can be listed by every user (mode {mode:04o}); "
            f"the recordings are 0600, but their names say which servers and databases "
            f"ran what: chmod 700 {d}")


def load_web_config(path: str | None) -> Any:
    """The --web-config file, checked whole (its certificates loaded) before
    anything starts: a bad one is one line and exit 2."""
    from .web import Web, WebConfigError

    if not path:
        return None
    try:
        web = Web(path, log)
    except WebConfigError as exc:
        raise Fatal(f"--web-config {path}: {exc}", ExitCode.USAGE) from None
    cfg = web.config
    if cfg.users and cfg.tls is None:
        log(f"--web-config {path}: basic auth without tls_server_config: the passwords "
            "cross the network in clear; add tls_server_config")
    return web


def exporter_command(opts: Options) -> int:
    names = list(opts.names)
    if len(names) > len(opts.targets):
        raise Fatal(f"{len(names)} --name for {len(opts.targets)} server(s): give one --name "
                    "per server, in the order of the servers", ExitCode.USAGE)
    resolved: list[str] = []
    for i, t in enumerate(opts.targets):
        try:
            resolved.append(names[i] if i < len(names) else server_name(t))
        except ValueError as exc:
            raise Fatal(f"bad connection string: {exc}", ExitCode.USAGE) from None
    dupes = {n for n in resolved if resolved.count(n) > 1}
    if dupes:
        raise Fatal(f"two servers named {sorted(dupes)[0]}: give each one a --name",
                    ExitCode.USAGE)
    host, port = _listen(opts.listen)
    web = load_web_config(opts.web_config)
    if web is None and not _loopback(host):
        log(f"--listen {opts.listen} serves plain HTTP without authentication to the network: "
            "give --web-config (TLS and basic auth, docs/metrics.md)")
    if opts.record_dir:
        check_record_dir(opts.record_dir)

    from prometheus_client import CollectorRegistry, make_wsgi_app
    from prometheus_client.process_collector import ProcessCollector

    from .collector import ExporterCollector
    from .web import describe, serve

    exp = Exporter(opts)
    exp.servers = [ServerWatch(exp, t, n) for t, n in zip(opts.targets, resolved)]
    exp.load_success()
    if opts.record_dir:
        exp.prune()
    exp.publish()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(exp.state))
    ProcessCollector(namespace="pgparmon_exporter", registry=registry)
    try:
        exp.httpd = serve(host, port, make_wsgi_app(registry), web, log)
    except OSError as exc:
        raise Fatal(f"cannot listen on {opts.listen}: {exc.strerror or exc} (another "
                    "process uses that port? give --listen HOST:PORT)", ExitCode.LISTEN) from None

    def stop(signum: int, frame: Any) -> None:
        exp.stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, stop)
    try:
        for s in exp.servers:
            try:
                s.open()
            except ConnectError as exc:
                raise Fatal(f"{s.name}: {exc}", ExitCode.CONNECT) from None
            exp.publish()
        scheme = web.config.scheme if web is not None else "http"
        log(f"serving {scheme}://{opts.listen}/metrics ({describe(web.config if web else None)})"
            "; watching "
            f"{', '.join(s.name for s in exp.servers)} every {opts.interval:g}s"
            + (f"; recordings in {opts.record_dir}" if opts.record_dir else ""))
        code = exp.run()
    finally:
        exp.shutdown()
    log("stopped; every recording is complete")
    return code


def targets(host: str | None, port: str | None, user: str | None, dbname: str | None,
            servers: list[str]) -> tuple[ConnTarget, ...]:
    """-h/-p/-U/-d as attach (one server), then each --server (a conninfo,
    URI or service=NAME; -U applies to those that name no user)."""
    out: list[ConnTarget] = []
    if host or port or dbname or not servers:
        out.append(ConnTarget(dbname=dbname, host=host, port=port, user=user))
    for s in servers:
        t = ConnTarget(dbname=s)
        if user and "user" not in s:
            t = replace(t, user=user)
        out.append(t)
    return tuple(out)
