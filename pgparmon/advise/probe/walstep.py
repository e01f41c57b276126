"""The WAL's own ceiling: how much WAL the server writes and flushes a second
with k writers (`measure_wal`).

A restore or a COPY load writes about as much WAL as it writes heap (a
restore of tables with a primary key measured 1.01 bytes of WAL a heap byte
on the project's VM, 0.98 on a 16-core host), and a COPY into a logged table
flushes it often: its bulk-write ring of 16 MB hands back dirty buffers, and a
buffer leaves the ring only once the WAL up to its change is flushed.  At a
high job count the WAL, not the streams, can be the limit (a 16-core host
restored 16 tables as fast at -j 16 as at -j 8).  The restore and COPY
probes load temporary or unlogged tables, which write no WAL, so this step
measures the WAL path on its own.

Each of k sessions writes, in a loop, transactions of RING_BYTES of WAL in
records of RECORD_BYTES (about one heap page each, as COPY's multi-insert
records are) through ``pg_logical_emit_message(true, 'pgparmon-probe',
...)``, and commits with ``synchronous_commit = local``: one flush per 16 MB
a session, as the ring asks for it (no wait for a standby).  The messages
touch no table and leave nothing behind but the WAL itself, which the
archiver and any standby receive like any other (logical decoding plugins
skip messages unless asked for them).  The rate is the WAL insert position's
progress over the step, read by a monitor connection.  The sessions are
the monitor's usual read-only ones (the function writes WAL, not data).

A step stops at its time or once it wrote its share of the volume cap
(half of max_wal_size, at least WAL_MIN_CAP, over all steps): the probe
should not force a checkpoint of its own.  The cap is held by the writers
themselves (each statement's bytes are taken from the step's share before
it runs), not by the monitor's looks: on a busy host the monitor's thread
may not run for a while, and at a few hundred MB a second a late look
would overshoot by many times a statement.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from ...connect import ConnectError, ConnTarget, connect
from .results import WalPoint
from ... import units as fmt

RECORD_BYTES = 8000
RING_BYTES = 16 << 20
CHUNK_BYTES = 1 << 20  # one statement's WAL: a stop waits for at most this
STOP_WAIT_S = 3.0
PREFIX = "pgparmon-probe"
# how long one step lasts, and the part of it measured (after every session
# has started writing)
STEP_S = 0.6
SETTLE_S = 0.05
POLL_S = 0.05
MIN_WINDOW_S = 0.2
WAL_MIN_CAP = 512 << 20
WAL_CAP_SHARE = 0.5  # of max_wal_size
# WAL bytes a restore writes per heap byte it loads (its tables with their
# primary keys; docs/advise.md "The WAL's ceiling")
WAL_PER_HEAP = 1.0

# the WAL steps run only within a budget of this much or more (a shorter
# probe keeps its time for the load steps)
WAL_MIN_BUDGET_S = 8.0
# a WAL step's set-up besides its measured time: k sessions connected, stopped
STEP_OVERHEAD_S = 0.4

WAL_LSN_SQL = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"


def wal_lsn(conn: Any) -> float:
    """The WAL insert position, in bytes, on `conn`."""
    row = conn.execute(WAL_LSN_SQL).fetchone()
    return float(row[0]) if row is not None else 0.0


_WRITE = ("SELECT count(pg_logical_emit_message(true, %s, repeat('x', %s))) "
          "FROM generate_series(1, %s)")


def wal_reserve(budget_s: float, counts: int) -> float:
    """Seconds of a probe's budget kept for its WAL steps (one for each of
    the plan's `counts` stream counts), or 0 when the budget is too short."""
    if budget_s < WAL_MIN_BUDGET_S:
        return 0.0
    return counts * (STEP_S + STEP_OVERHEAD_S)


class _Share:
    """A step's volume cap, shared by its writers: each takes a statement's
    bytes from it before running the statement, and none runs once it is
    spent."""

    def __init__(self, cap: float) -> None:
        self.left = cap
        self.lock = threading.Lock()
        self.spent = threading.Event()

    def take(self, n: int) -> bool:
        with self.lock:
            if self.left < n:
                self.spent.set()
                return False
            self.left -= n
            return True


class _Writer:
    """One session writing WAL until told to stop or its step's share is spent."""

    def __init__(self, target: ConnTarget, share: _Share) -> None:
        self.conn: Any = connect(target)
        self.conn.execute("SET synchronous_commit = local")
        self.share = share
        self.error: str | None = None
        self.started = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # a transaction of RING_BYTES in statements of CHUNK_BYTES: a stop
        # is seen between two statements and rolls the transaction back
        # (no cancel: the server would log each as an error)
        n = max(1, CHUNK_BYTES // RECORD_BYTES)
        chunks = max(1, RING_BYTES // CHUNK_BYTES)
        try:
            while not self.stop.is_set() and not self.share.spent.is_set():
                self.conn.execute("BEGIN")
                self.started.set()
                done = False
                for _ in range(chunks):
                    if self.stop.is_set() or not self.share.take(CHUNK_BYTES):
                        done = True
                        break
                    self.conn.execute(_WRITE, (PREFIX, RECORD_BYTES, n))
                self.conn.execute("ROLLBACK" if done else "COMMIT")
        except Exception as exc:  # noqa: BLE001 - refused, or cancelled after a stalled stop
            if not self.stop.is_set():
                self.error = str(exc).strip().splitlines()[0] if str(exc).strip() else "failed"
        finally:
            self.started.set()

    def halt(self) -> None:
        self.stop.set()

    def close(self) -> None:
        self.thread.join(STOP_WAIT_S)
        if self.thread.is_alive():  # a statement that does not end: cancel it
            try:
                self.conn.cancel()
            except Exception:  # noqa: BLE001 - best effort
                pass
            self.thread.join(5.0)
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass


def measure_wal(target: ConnTarget, counts: list[int], deadline: float,
                max_wal_size: float | None, notes: list[str]) -> list[WalPoint]:
    """W(k) for each k of counts (fewest first), within the deadline (a
    time.monotonic() value); [] with a note when the step cannot run."""
    ks = sorted({k for k in counts if k >= 1})
    if not ks:
        return []
    # one transaction of RING_BYTES may take a while when many share the WAL
    target = replace(target, statement_timeout_ms=max(target.statement_timeout_ms, 30000))
    cap = max(WAL_MIN_CAP, (max_wal_size or 0) * WAL_CAP_SHARE) / len(ks)
    try:
        mon = connect(target)
    except ConnectError as exc:
        notes.append(f"the WAL was not measured: {exc}")
        return []
    out: list[WalPoint] = []
    try:
        for k in ks:
            if time.monotonic() + STEP_S + 0.5 > deadline:
                notes.append(f"no time left in the budget to measure the WAL with {k} "
                             "sessions")
                break
            p = _step(target, mon, k, cap, notes)
            if p is None:
                break
            out.append(p)
    finally:
        mon.close()
    if out:
        total = sum(p.wal_bytes for p in out)
        rates = ", ".join(f"{fmt.rate(p.bytes_per_s)} with {p.streams}" for p in out)
        notes.append(f"WAL: {fmt.size(total)} written through pg_logical_emit_message "
                     f"('{PREFIX}' messages of {RECORD_BYTES} B, a flush every "
                     f"{fmt.size(RING_BYTES)} a session as COPY's ring asks): {rates} "
                     "session(s)")
    return out


def _step(target: ConnTarget, mon: Any, k: int, cap: float, notes: list[str]
          ) -> WalPoint | None:
    """k writers until STEP_S has passed or they wrote `cap` bytes since
    they started (counted from before the first one did); the rate is taken
    from the first reading after every writer began to the last."""
    writers: list[_Writer] = []
    share = _Share(cap)
    try:
        try:
            writers = [_Writer(target, share) for _ in range(k)]
        except ConnectError as exc:
            notes.append(f"the WAL was not measured: {exc}")
            return None
        start = wal_lsn(mon)
        t_start = time.monotonic()
        for w in writers:
            w.thread.start()
        for w in writers:
            w.started.wait(5.0)
        time.sleep(SETTLE_S)
        t0, l0 = time.monotonic(), wal_lsn(mon)
        t1, l1 = t0, l0
        pace = (l0 - start) / max(t0 - t_start, 1e-3)  # bytes a second, so far
        # stop before the next look would pass the cap; a look taken after
        # the writers spent their share (they stop on their own) is not kept:
        # it would count their stop as part of the rate
        while (t1 < t_start + STEP_S and l1 - start + pace * POLL_S < cap
               and not share.spent.is_set()):
            time.sleep(POLL_S)
            spent = share.spent.is_set()
            t, lsn = time.monotonic(), wal_lsn(mon)
            if spent:
                break
            pace = (lsn - l1) / max(t - t1, 1e-3)
            t1, l1 = t, lsn
        failed = next((w.error for w in writers if w.error), None)
        if failed:
            notes.append(f"the WAL was not measured: {failed}")
            return None
        if t1 <= t0:  # the cap was reached while the sessions started: from the start
            t0, l0 = t_start, start
        if t1 - t0 < MIN_WINDOW_S:
            notes.append(f"the WAL step with {k} session{'s' if k > 1 else ''} was cut short "
                         f"by its volume cap ({fmt.size(cap)}, from max_wal_size): a larger "
                         "max_wal_size lets it measure longer")
        return WalPoint(k, l1 - l0, t1 - t0)
    finally:
        for w in writers:
            w.halt()
        for w in writers:
            w.close()
