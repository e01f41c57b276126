"""`pgparmon exporter`: a long-running process that watches one or more
servers and the host, follows every job it discovers with the same Monitor
as `attach` (followers.py), records each one, and serves /metrics
(collector.py, web.py). Here: the command (its options checked before
anything starts), the loop over the servers, the state the HTTP thread
reads, and the recordings directory (retention.py prunes it).
"""

from __future__ import annotations

import contextlib
import getpass
import ipaddress
import json
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import conninfo as pgconninfo

from ..connect import ConnectError, ConnTarget, build_conninfo
from ..exitcodes import ExitCode, Fatal
from ..jobs.base import Job
from ..private import make_private_dirs, open_private, open_to_others
from ..redact import redact_text
from . import retention
from .collector import State
from .followers import SafeRecorder, ServerWatch
from .journal import log

__all__ = ["Exporter", "Options", "SafeRecorder", "exporter_command", "log", "server_name",
           "targets"]

SUCCESS_FILE = "last-success.json"
PRUNE_EVERY_S = 60.0


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
