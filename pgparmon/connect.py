"""Monitor connections: libpq conventions in, a safe read-only session out.

Everything libpq already does (PG* environment variables, .pgpass, service
files, conninfo strings and URIs in -d) is left to libpq: we only add the
psql-style -h/-p/-U/-d options on top and force the session settings that make
the monitor harmless to the database it watches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import psycopg
from psycopg import conninfo as pgconninfo

APPLICATION_NAME = "pgparmon"
DEFAULT_STATEMENT_TIMEOUT_MS = 2000
DEFAULT_LOCK_TIMEOUT_MS = 100


class ConnectError(RuntimeError):
    """Could not connect: the message is one line that says what to do."""


@dataclass(frozen=True)
class ConnTarget:
    """Where to connect, as the user gave it (never holds a password itself:
    libpq reads it from the conninfo, PGPASSWORD or .pgpass)."""

    dbname: str | None = None  # a name, a conninfo string or a URI, as psql's -d
    host: str | None = None
    port: int | str | None = None
    user: str | None = None
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    connect_timeout_s: int = 5

    def with_dbname(self, dbname: str) -> ConnTarget:
        """The same target, another database (keeps a conninfo's other fields)."""
        base = self.dbname or ""
        if "=" in base or base.startswith(("postgresql://", "postgres://")):
            params = {k: str(v) for k, v in pgconninfo.conninfo_to_dict(base).items()
                      if v is not None}
            params["dbname"] = dbname
            return replace(self, dbname=pgconninfo.make_conninfo("", **params))
        return replace(self, dbname=dbname)


def session_options(statement_timeout_ms: int, lock_timeout_ms: int) -> str:
    # Sent in the startup packet, so they hold from the first statement on and
    # a pooler or ALTER ROLE default cannot silently drop them.
    return (f"-c default_transaction_read_only=on -c statement_timeout={statement_timeout_ms} "
            f"-c lock_timeout={lock_timeout_ms} -c idle_in_transaction_session_timeout=10000")


def client_conninfo(t: ConnTarget) -> str:
    """The conninfo a client program such as pg_dump would use for the same
    target: no session settings in the startup packet (a pooler may refuse
    them), our application_name."""
    kwargs: dict[str, str] = {"application_name": APPLICATION_NAME,
                              "connect_timeout": str(t.connect_timeout_s)}
    for k, v in (("host", t.host), ("port", t.port), ("user", t.user)):
        if v:
            kwargs[k] = str(v)
    base = t.dbname or ""
    if base and not ("=" in base or "://" in base):
        kwargs["dbname"] = base
        base = ""
    return pgconninfo.make_conninfo(base, **kwargs)


def build_conninfo(t: ConnTarget) -> str:
    """A conninfo string for libpq: -d may itself be a conninfo or URI (libpq
    expands it), the explicit -h/-p/-U win, and our session settings are
    forced."""
    kwargs: dict[str, str] = {}
    if t.host:
        kwargs["host"] = t.host
    if t.port:
        kwargs["port"] = str(t.port)
    if t.user:
        kwargs["user"] = t.user
    kwargs["application_name"] = APPLICATION_NAME
    kwargs["options"] = session_options(t.statement_timeout_ms, t.lock_timeout_ms)
    kwargs["connect_timeout"] = str(t.connect_timeout_s)
    base = t.dbname or ""
    if base and not ("=" in base or "://" in base):
        kwargs["dbname"] = base
        base = ""
    # make_conninfo merges keywords over the (parsed) base string
    return pgconninfo.make_conninfo(base, **kwargs)


def connect(t: ConnTarget) -> psycopg.Connection[tuple[object, ...]]:
    """Open a monitor connection: autocommit (a fresh stats snapshot per
    statement), read-only, timeouts set, every statement prepared."""
    from .redact import redact_text

    try:
        conn = psycopg.connect(build_conninfo(t), autocommit=True, prepare_threshold=0)
    except psycopg.OperationalError as exc:
        raise ConnectError(_connect_hint(redact_text(_first_line(str(exc))))) from None
    except psycopg.ProgrammingError as exc:  # malformed conninfo
        raise ConnectError(f"bad connection string: {redact_text(_first_line(str(exc)))}") \
            from None
    return conn


def _first_line(s: str) -> str:
    # libpq's first line says what failed ("connection to server at ... failed:
    # Connection refused"); the lines after it are hints we give better ourselves
    lines = [ln.strip() for ln in s.strip().splitlines() if ln.strip()]
    first = lines[0] if lines else s.strip()
    return first.removeprefix("connection failed: ")


def _connect_hint(msg: str) -> str:
    low = msg.lower()
    if "password authentication failed" in low or "no password supplied" in low:
        hint = "check the user and password (PGPASSWORD, ~/.pgpass or the conninfo)"
    elif "does not exist" in low and "database" in low:
        hint = "check the database name given with -d"
    elif "role" in low and "does not exist" in low:
        hint = "check the user given with -U"
    elif "no such file" in low or "connection refused" in low or "could not connect" in low:
        hint = "is the server running there? give -h HOST and -p PORT like psql"
    elif "unsupported startup parameter" in low:
        hint = ("a connection pooler (PgBouncer) refused pgparmon's session settings "
                "(statement_timeout, lock_timeout, read-only), which pgparmon never runs "
                "without: connect pgparmon to the server itself, not through the pooler")
    elif "timeout" in low:
        hint = "the server did not answer in time: check -h/-p and the network"
    else:
        hint = "check the connection options (-h -p -U -d, PG* variables, service file)"
    return f"cannot connect: {msg} ({hint})"


def check_reachable(t: ConnTarget | None, what: str) -> None:
    """Connect once and close (a --source given at start): ConnectError with
    one line naming the option when it cannot be reached."""
    if t is None:
        return
    try:
        connect(t).close()
    except ConnectError as exc:
        raise ConnectError(f"{what}: {exc}") from None


def describe_target(t: ConnTarget) -> str:
    """The target in words for screens and recordings (a password in a
    conninfo string or URI redacted)."""
    from .redact import redact_text

    bits = [redact_text(t.dbname)] if t.dbname else []
    bits += [f"{k}={v}" for k, v in (("host", t.host), ("port", t.port), ("user", t.user)) if v]
    return " ".join(bits) or "(the PG* environment's server)"
