"""Can pg_dump -j run through this connection? Its leader exports a
snapshot in a REPEATABLE READ, READ ONLY transaction that lasts the whole
dump, and each of its j workers opens a connection, begins the same kind of
transaction and imports that snapshot (SET TRANSACTION SNAPSHOT), holding
it to the end too. So -j needs j + 1 server sessions in open transactions at
once, all on the server that exported the snapshot.

Direct to a server that always works. Through a pooler or proxy it may not:
a transaction-mode pooler whose pool has fewer than j + 1 server
connections makes the workers wait for one (pg_dump hangs until the
pooler's query_wait_timeout); a proxy that spreads connections over several
servers sends a worker to one that never saw the snapshot ("invalid
snapshot identifier"). The check does what pg_dump does, with connections
made as pg_dump makes them (no session options, no prepared statements),
read-only transactions with their own statement and lock timeouts, each step
within a deadline, and rolls everything back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from ..connect import ConnTarget, client_conninfo
from ..redact import redact_text

STEP_S = 5.0  # a session that gets no server within this is waiting for one


@dataclass(frozen=True)
class SnapshotCheck:
    sessions: int  # sessions that held a transaction with the snapshot at once
    wanted: int  # sessions tried (the largest j tried + its leader)
    error: str | None  # why the next one failed (None: all worked)
    blocked: bool  # the next one waited past STEP_S (a pool with no free server)

    @property
    def ok(self) -> bool:
        return self.sessions >= self.wanted

    @property
    def max_jobs(self) -> int:
        """The largest pg_dump -j that got its sessions (0: none, -j needs 2+)."""
        return max(0, self.sessions - 1)


def _begin(conn: psycopg.Connection[Any], timeout_ms: int) -> None:
    conn.execute("BEGIN")
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(timeout_ms)))
    conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(timeout_ms)))


def _step(fn: Any) -> tuple[bool, str | None]:
    """Run fn in a thread: (finished in time, its error's first line)."""
    out: list[str | None] = []

    def run() -> None:
        try:
            fn()
            out.append(None)
        except Exception as exc:  # noqa: BLE001 - reported, one line
            text = str(exc).strip().splitlines()
            out.append(redact_text(text[0] if text else type(exc).__name__))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(STEP_S)
    if t.is_alive():
        return False, None
    return True, out[0] if out else None


def check_snapshots(target: ConnTarget, jobs: int) -> SnapshotCheck:
    """Export a snapshot and import it on `jobs` more sessions, all held
    open at once, as pg_dump -j jobs does."""
    conns: list[psycopg.Connection[Any]] = []
    info = client_conninfo(target)
    wanted = jobs + 1
    held = 0
    snap: list[str] = []
    timeout_ms = int(STEP_S * 1000)
    stage: list[str] = []
    try:
        for i in range(wanted):
            def one(i: int = i) -> None:
                stage.append("session")  # a connection and a server for its transaction
                conn = psycopg.connect(info, autocommit=True, prepare_threshold=None)
                conns.append(conn)
                _begin(conn, timeout_ms)
                stage.append("snapshot")
                if i == 0:
                    row = conn.execute("SELECT pg_catalog.pg_export_snapshot()").fetchone()
                    snap.append(str(row[0]) if row else "")
                else:
                    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(
                        sql.Literal(snap[0])))
            stage.clear()
            done, err = _step(one)
            if not done:
                return SnapshotCheck(held, wanted, None, True)
            if err is not None:
                # no session to be had (a pooler's wait timeout, its client
                # limit) reads as waiting; a refused snapshot as its own fault
                return SnapshotCheck(held, wanted, err, stage[-1:] == ["session"])
            held += 1
        return SnapshotCheck(held, wanted, None, False)
    finally:
        for c in conns:  # open transactions roll back as their sessions end
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing anyway
                pass


def verdict(check: SnapshotCheck) -> str:
    """What the check means for pg_dump -j, in one sentence."""
    if check.ok:
        return (f"pg_dump -j {check.wanted - 1} through it: its {check.wanted} sessions "
                "shared one snapshot")
    if check.blocked:
        why = f" ({check.error})" if check.error else ""
        return (f"pg_dump -j {check.wanted - 1} through it would wait for a server session: "
                f"only {check.sessions} sessions could hold a transaction at once{why} (a "
                "pooler's pool size?), and -j N holds N + 1 for the whole dump")
    return (f"pg_dump -j through it fails: a worker could not import the leader's snapshot "
            f"({check.error}; a pooler or proxy sending sessions to different servers?)")
