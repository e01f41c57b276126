"""The probe's psql: which one, its command line, and its environment.

psql gets everything through PG* environment variables built from
`pgparmon.connect.build_conninfo` (read-only session unless asked,
statement_timeout long enough for the probe, a short lock_timeout,
application_name ``pgparmon-probe``); nothing of the connection is on its
command line.  Also: the one-line message of a psql that failed.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import replace

import psycopg
from psycopg import conninfo as pgconninfo

from ...connect import ConnTarget, build_conninfo
from ...redact import redact_text
from ...toc import client_program, program_major
from .results import ProbeError

APP_NAME = "pgparmon-probe"


def find_psql(preferred: str | None = None) -> str:
    """psql next to the pg_restore pgparmon uses (same release), else PATH."""
    found = preferred or client_program("psql")
    if found:
        return found
    raise ProbeError("psql not found: install the PostgreSQL client programs or put their bin "
                     "directory on PATH (or use --history / --from-timings)")


def psql_argv(psql: str) -> list[str]:
    """psql's command line: no connection settings (they are in the
    environment), no psqlrc, quiet, unaligned, stop at the first error, the
    script on stdin."""
    return [psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-f", "-"]


# libpq connection keywords and the environment variables that set them
# (libpq docs, "Environment Variables").
ENV_FOR_KEYWORD: dict[str, str] = {
    "host": "PGHOST", "hostaddr": "PGHOSTADDR", "port": "PGPORT", "dbname": "PGDATABASE",
    "user": "PGUSER", "password": "PGPASSWORD", "passfile": "PGPASSFILE",
    "require_auth": "PGREQUIREAUTH", "channel_binding": "PGCHANNELBINDING",
    "service": "PGSERVICE", "options": "PGOPTIONS", "application_name": "PGAPPNAME",
    "sslmode": "PGSSLMODE", "requiressl": "PGREQUIRESSL", "sslnegotiation": "PGSSLNEGOTIATION",
    "sslcompression": "PGSSLCOMPRESSION", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY",
    "sslcertmode": "PGSSLCERTMODE", "sslrootcert": "PGSSLROOTCERT", "sslcrl": "PGSSLCRL",
    "sslcrldir": "PGSSLCRLDIR", "sslsni": "PGSSLSNI", "requirepeer": "PGREQUIREPEER",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION",
    "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
    "min_protocol_version": "PGMINPROTOCOLVERSION",
    "max_protocol_version": "PGMAXPROTOCOLVERSION",
    "gssencmode": "PGGSSENCMODE", "krbsrvname": "PGKRBSRVNAME", "gsslib": "PGGSSLIB",
    "gssdelegation": "PGGSSDELEGATION", "connect_timeout": "PGCONNECT_TIMEOUT",
    "client_encoding": "PGCLIENTENCODING", "target_session_attrs": "PGTARGETSESSIONATTRS",
    "load_balance_hosts": "PGLOADBALANCEHOSTS",
}
# Keywords without an environment variable that change nothing the probe
# measures: left out.
_DROPPABLE = frozenset({"fallback_application_name", "keepalives", "keepalives_idle",
                        "keepalives_interval", "keepalives_count", "tcp_user_timeout"})


def psql_env(target: ConnTarget, *, statement_timeout_ms: int, read_only: bool = True,
             base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the probe's psql: `base` (default os.environ)
    plus the PG* variables of build_conninfo(target) with our statement
    timeout and application_name.  read_only False turns the session's
    default_transaction_read_only off (the restore probe's COPY FROM into
    temporary tables needs that)."""
    t = replace(target, statement_timeout_ms=int(statement_timeout_ms))
    try:
        params = pgconninfo.conninfo_to_dict(build_conninfo(t))
    except psycopg.ProgrammingError as exc:
        raise ProbeError(f"bad connection string: {redact_text(_first_line(str(exc)))}") \
            from None
    params["application_name"] = APP_NAME
    if not read_only:
        params["options"] = str(params.get("options") or "").replace(
            "default_transaction_read_only=on", "default_transaction_read_only=off")
    env = dict(os.environ if base is None else base)
    # Messages in English (we read them); the C locale does not change the
    # client encoding of a non-interactive psql.
    env.update(LC_ALL="C", LANG="C")
    env.pop("LANGUAGE", None)
    for key, value in params.items():
        if value is None:
            continue
        var = ENV_FOR_KEYWORD.get(key)
        if var is None:
            if key in _DROPPABLE:
                continue
            raise ProbeError(f"the connection option {key} has no PG* environment variable, and "
                             "the probe never passes connection settings on a command line: "
                             "drop it or use --history / --from-timings")
        env[var] = str(value)
    return env


def _first_line(s: str) -> str:
    lines = [ln.strip() for ln in s.strip().splitlines() if ln.strip()]
    return lines[0] if lines else s.strip()


def is_local_host(host: str | None) -> bool:
    """Whether every host of PGHOST is this machine (a socket directory,
    an abstract socket, localhost or our host name): only then can the
    backends' CPU be read."""
    if not host:
        return True  # the default Unix socket
    names = {socket.gethostname(), "localhost", "127.0.0.1", "::1"}
    return all(h.startswith(("/", "@")) or h in names
               for h in host.split(",") if h)


def error_line(lines: Iterable[str]) -> str:
    """The line that says what went wrong, without psql's location prefix."""
    cleaned = []
    for ln in lines:
        ln = re.sub(r"^psql:[^:]*:\d+:\s*", "", ln.strip())
        ln = re.sub(r"^psql: error:\s*", "", ln)
        if ln:
            cleaned.append(ln)
    for ln in cleaned:
        if re.match(r"^(ERROR|FATAL|PANIC):", ln) or "error" in ln.lower():
            return redact_text(re.sub(r"^(ERROR|FATAL|PANIC):\s*", "", ln))
    return redact_text(cleaned[0]) if cleaned else ""


def checked_psql() -> str:
    """find_psql's psql, after checking it is 13+ (the probe needs \\warn)."""
    psql = find_psql()
    major = program_major(psql)
    if major is not None and major < 13:
        raise ProbeError(f"the probe needs psql 13 or newer ({psql} is {major})")
    return psql
