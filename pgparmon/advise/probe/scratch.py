"""The probes' scratch tables dropped (`drop_scratch`): the COPY probe's
clones and the restore probe's logged step's tables."""

from __future__ import annotations

from typing import Any

import psycopg

from .results import ProbeError


def drop_scratch(conn: psycopg.Connection[Any], scratch_sql: str) -> None:
    """DROP the scratch table, retrying while a killed stream's backend
    still holds its lock (a few seconds at most)."""
    last: Exception | None = None
    for _ in range(5):
        try:
            conn.execute(f"DROP TABLE IF EXISTS {scratch_sql}")
            return
        except psycopg.errors.LockNotAvailable as exc:
            last = exc
        except psycopg.Error as exc:
            last = exc
            if conn.closed or conn.broken:
                break
    raise ProbeError(f"could not drop the probe's scratch table {scratch_sql}: {last}; "
                     "drop it by hand")
