"""What `pgparmon advise` is asked (Request) and how it refuses bad input
(AdviseError); shared by the orchestration (advice.py), the checks
(checks.py) and the evidence gathering (evidence.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from ..connect import ConnTarget, connect
from ..exitcodes import ExitCode
from ..redact import redact_text
from .predict import Compression


class AdviseError(Exception):
    """Bad input: one line, what to do. `code` is the exit code."""

    def __init__(self, msg: str, code: int = ExitCode.USAGE) -> None:
        super().__init__(msg)
        self.code = code


def refused_queries(exc: Exception) -> AdviseError:
    """The server refused advise's catalog queries: its first line, redacted."""
    first = str(exc).strip().splitlines()[0]
    return AdviseError(f"the server refused the catalog queries: {redact_text(first)}",
                       ExitCode.CONNECT)


@contextmanager
def catalog_session(target: ConnTarget) -> Iterator[psycopg.Connection[Any]]:
    """advise's read-only session on a server: closed at the end; the
    server's refusal of a query is one line (refused_queries)."""
    conn = connect(target)
    try:
        yield conn
    except psycopg.Error as exc:
        raise refused_queries(exc) from None
    finally:
        conn.close()


@dataclass
class Request:
    kind: str  # dump | restore | copy | subscription
    conn: ConnTarget | None  # None: no server (timings alone)
    target_dir: str | None = None
    archive: str | None = None
    probe: bool = False
    probe_seconds: float | None = None
    history: list[str] = field(default_factory=list)
    timings: dict[int, float] | None = None
    compression: Compression = field(default_factory=lambda: Compression("gzip"))
    max_jobs: int | None = None
    dbname_for_command: str | None = None  # as the user gave -d (redacted when shown)
    host: str | None = None
    port: str | None = None
    user: str | None = None
    copy_file: str | None = None  # copy: the file to load
    copy_table: str | None = None  # copy: the table to load it into
    copy_format: str = "csv"  # copy: csv | text
    copy_header: bool = False  # copy: the file's first line is a header
    subscription: str | None = None  # subscription: its name (one to create, or running)
    publications: list[str] = field(default_factory=list)  # subscription: what it subscribes
    source: ConnTarget | None = None  # subscription: the publisher
