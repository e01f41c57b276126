"""The server side of a sample: one prepared statement, one round trip."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from .. import sql
from ..connect import ConnectError, ConnTarget, connect
from ..redact import redact_text
from ..snapshot import DbSample


@dataclass(frozen=True)
class ServerFacts:
    version_num: int
    version: str
    database: str
    user: str
    backend_pid: int
    backend_start: float | None
    postmaster_start: float | None
    settings: dict[str, str]
    is_superuser: bool
    read_all_stats: bool
    has_copy_progress: bool
    has_index_progress: bool
    # no database connection: a job followed from the host alone (a
    # pgBackRest restore runs while the server is down)
    host_only: bool = False

    @property
    def port(self) -> int:
        return int(self.settings.get("port") or 5432)

    @property
    def data_directory(self) -> str | None:
        return self.settings.get("data_directory")

    @property
    def block_size(self) -> int:
        return int(self.settings.get("block_size") or 8192)

    @property
    def major(self) -> int:
        return self.version_num // 10000

    def missing_views(self) -> list[str]:
        out: list[str] = []
        if self.host_only:
            return out  # no server: said once, as such
        if not self.has_copy_progress:
            out.append("pg_stat_progress_copy (PostgreSQL 14+)")
        if not self.has_index_progress:
            out.append("pg_stat_progress_create_index (PostgreSQL 12+)")
        return out


def host_only_facts(data_directory: str | None = None) -> ServerFacts:
    """The facts of a job followed with no server connection."""
    return ServerFacts(
        version_num=0, version="none (host only)", database="", user="", backend_pid=0,
        backend_start=None, postmaster_start=None,
        settings={"data_directory": data_directory} if data_directory else {},
        is_superuser=False, read_all_stats=True, has_copy_progress=False,
        has_index_progress=False, host_only=True)


def read_facts(conn: psycopg.Connection[Any]) -> ServerFacts:
    version = conn.info.server_version
    row = conn.execute(sql.load("facts", version)).fetchone()
    assert row is not None
    d = row[0]
    views = d.get("views") or {}
    return ServerFacts(
        version_num=int(d["version_num"]), version=str(d["version"]), database=d["database"],
        user=d["user"], backend_pid=int(d["backend_pid"]), backend_start=d.get("backend_start"),
        postmaster_start=d.get("postmaster_start"),
        settings={k: str(v) for k, v in (d.get("settings") or {}).items()},
        is_superuser=bool(d.get("is_superuser")), read_all_stats=bool(d.get("read_all_stats")),
        has_copy_progress=bool(views.get("copy")),
        has_index_progress=bool(views.get("create_index")),
    )


# the sample's application_name regexes when no driver names one (jobs.registry.sample_apps)
NO_APPS: dict[str, str | None] = {"app_text": None, "app_idle": None, "app_repl": None}


class DbSampler:
    """Keeps one monitor connection; reconnects with backoff when it breaks.

    sample() never raises for server trouble: the DbSample says what happened
    (statement timeout, connection lost, reconnecting) so the monitor keeps
    going and the view can tell the user.
    """

    def __init__(self, target: ConnTarget, database_filter: str | None = None,
                 parts: tuple[str, ...] = (), server_types: tuple[str, ...] = (),
                 apps: Mapping[str, str | None] | None = None) -> None:
        self.target = target
        self.database_filter = database_filter
        # queries of the drivers' own (sql/NAME_*.sql, one JSON value each)
        # read in the same round trip, into DbSample.parts; and the server
        # process types that work for a kind of job, sampled with the
        # client sessions (Driver.sample_parts, Driver.backend_types); and
        # the application_name regexes of the sessions the tools name
        # (Driver.session_apps: whose text is kept, which are kept idle,
        # which walsenders are sampled), bound parameters of the sample
        self.parts: tuple[str, ...] = ()
        self.server_types: tuple[str, ...] = ()
        self.apps: dict[str, str | None] = dict(NO_APPS)
        self.read_extras(parts, server_types, apps)
        self.conn: psycopg.Connection[Any] | None = None
        self.facts: ServerFacts | None = None
        self._retry_at = 0.0
        self._backoff = 0.5
        self.reconnects = 0
        self.lost_since: float | None = None
        # the bands only a physical backup needs (its progress view, WAL
        # streams, archiver, slots): read until a job of another kind is found
        self.backup_bands = True

    def read_extras(self, parts: tuple[str, ...] = (), server_types: tuple[str, ...] = (),
                    apps: Mapping[str, str | None] | None = None) -> None:
        """The drivers' parts and server process types the next samples read:
        every driver's while jobs are looked for, the followed job's
        driver's alone once it is known (jobs.registry's sample_extras and
        job_extras); `apps`: the application_name regexes (None: none, no
        session is kept for its name)."""
        self.parts = tuple(parts)
        self.server_types = tuple(server_types)
        self.apps = {**NO_APPS, **(apps or {})}

    def open(self) -> ServerFacts:
        self.conn = connect(self.target)
        try:
            self.facts = read_facts(self.conn)
        except psycopg.Error as exc:
            self.close()
            first = redact_text(str(exc).strip().splitlines()[0] if str(exc).strip() else "")
            raise ConnectError(f"connected, but the server did not answer the monitor's first "
                               f"query: {first}") from None
        if self.facts.version_num < 100000:
            self.close()
            raise ConnectError(f"server {self.facts.version} is too old: pgparmon needs "
                               "PostgreSQL 10 or newer (pg_stat_activity.backend_type)")
        return self.facts

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            self.conn = None

    def sample(self, pids: list[int] | None = None) -> DbSample:
        """One round trip; `pids`: the followed job's backends, sampled even
        when idle (a load between batches)."""
        now = time.monotonic()
        if self.conn is None or self.conn.closed:
            if now < self._retry_at:
                return DbSample(error=f"connection lost; reconnecting in "
                                      f"{self._retry_at - now:.0f}s")
            try:
                self.open()
                self.reconnects += 1
                self._backoff = 0.5
                self.lost_since = None
            except ConnectError as exc:
                self._retry_at = now + self._backoff
                self._backoff = min(self._backoff * 2, 10.0)
                return DbSample(error=f"reconnecting: {exc}")
        assert self.conn is not None and self.facts is not None
        query = sample_query(self.facts.version_num, self.parts)
        t0 = time.perf_counter()
        try:
            cur = self.conn.execute(query, {"db": self.database_filter,
                                           "pids": sorted(pids or ()),
                                           "backup": self.backup_bands,
                                           "types": list(self.server_types),
                                           **self.apps})
            row = cur.fetchone()
        except psycopg.errors.LockNotAvailable:
            return DbSample(error="sample skipped: another session holds a lock the monitor "
                                  f"query needs (lock_timeout {self.target.lock_timeout_ms} ms); "
                                  "the monitor does not wait")
        except psycopg.errors.QueryCanceled:
            return DbSample(error="sample skipped: the monitor query hit statement_timeout "
                                  f"({self.target.statement_timeout_ms} ms); the server is slow")
        except psycopg.errors.InsufficientPrivilege as exc:
            return DbSample(error=f"missing privilege: {redact_text(str(exc).strip())} "
                                  "(grant pg_monitor to this role)")
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self.close()
            self.lost_since = self.lost_since or now
            self._retry_at = now + self._backoff
            msg = redact_text(str(exc).strip().splitlines()[0] if str(exc).strip() else
                              type(exc).__name__)
            return DbSample(error=f"connection lost: {msg}")
        latency = (time.perf_counter() - t0) * 1000
        assert row is not None
        return DbSample.from_json(row[0], latency, row[1] if len(row) > 1 else None)

    def query_json(self, name: str, params: dict[str, Any] | None = None) -> Any:
        """A one-off catalog query (not per tick); raises psycopg errors (an
        OperationalError when the connection is down: the samples reconnect)."""
        if self.conn is None or self.conn.closed or self.facts is None:
            raise psycopg.OperationalError("the monitor's connection is down")
        row = self.conn.execute(sql.load(name, self.facts.version_num), params).fetchone()
        return row[0] if row else None


@functools.cache
def sample_query(version_num: int, parts: tuple[str, ...] = ()) -> str:
    """The sample, with the parts the drivers read in the same round trip
    (each part that has a band for this server) as a second column."""
    base = sql.load("sample", version_num)
    have = []
    for name in parts:
        try:
            have.append((name, sql.load(name, version_num)))
        except sql.NoBandError:
            continue  # a part this server's version cannot run: absent from parts
    if not have:
        return base
    inner = ", ".join(f"'{name}', ({_statement(q)}\n)" for name, q in have)
    return f"SELECT ({_statement(base)}\n) AS sample, json_build_object({inner}) AS parts"


def _statement(q: str) -> str:
    return q.strip().rstrip(";")
