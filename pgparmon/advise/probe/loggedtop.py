"""The restore probe's logged step (`LoggedTop`): its most streams once more,
loading into regular, WAL-logged tables as pg_restore does.

The steps load temporary tables: they measure decompression, parsing and
inserting, but not what a restore pays for its WAL where many sessions
share it: WAL insertion, the flushes each COPY's 16 MB bulk-write ring
waits for, the shared buffers.  On a 16-core host a restore of 16 equal
tables ran its data at about 430 MB/s of heap at -j 8 and at -j 16 alike,
where the temporary tables took 550 and 620 MB/s, and the WAL step's
messages (`walstep`) were written at 0.6 to 1.1 GB/s: the cost is in the
logged COPY itself, not in the WAL's raw rate.  So one step, at the most
streams the steps reached up to the cores (`logged_count`), loads the same
data files into regular clones of the tables (one set per stream, named
``pgparmon_probe_<pid>_<hex>_<stream>_<n>`` in the session's current
schema, dropped after the step whatever happened), and the WAL insert
position is read around it.  Its rate, read as pg_restore's client would
have run it like the other steps, gives the share each stream loses for
every other loading logged tables beside it (`as_logged_load`): the
steps are read as logged loads through it.

`run_logged` runs such a step and reads the WAL around it for the COPY
probe's step of its most streams too (`copyload._logged_top_step`).

Nothing of the database's own is touched: the tables are new, their
names the probe's; the step needs the CREATE privilege on the current
schema (a restore's target: the restore needs it too), and is left out,
with a note, without it.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import time
from collections.abc import Callable
from typing import Any

import psycopg

from ...connect import ConnectError, ConnTarget, connect
from ...redact import redact_text
from ... import units as fmt
from .client_cost import as_pg_restore
from .plan import plan_seconds, usable_cores
from .results import LoggedStep, ProbeError, ProbePoint
from .scratch import drop_scratch
from .steps import STEP_OVERHEAD_S, Aborted, StepRunner
from .walstep import wal_lsn

# The step's COPY time, and what its tables' creation and drop, its
# session's starts and the WAL positions add to it.
LOGGED_TOP_S = 1.5
LOGGED_TOP_SETUP_S = 0.35
# Its ranges: this many a stream at the steps' rate (a real restore runs
# one COPY a table: a range of half a second, some 25 MB a stream on a
# 16-core host, fills COPY's 16 MB ring and wraps it; and one started just
# before the step's time is up ends soon after it, even at half the rate)
RANGES_A_STREAM = 3
BASE_PREFIX = "pgparmon_probe_"
# The fewest streams the step runs at: the share s one stream loses for
# every other is read over at least 3 others.  Over one, it cannot be told
# from a logged stream's dearer CPU on a host whose cores the streams fill,
# nor from the noise: on this 2-core VM a COPY's step at 2 streams ran at
# 0.75-0.89 of the unlogged rate while the real 2-stream loads lost a few
# percent (5 runs), and read as sharing it advised 1 stream twice where 2
# were 1.2-1.6x faster.
MIN_STREAMS = 4


def logged_count(points: list[ProbePoint], cores: int) -> ProbePoint:
    """The step the logged step repeats: the most streams measured that
    each have a core, else the fewest measured.  Past the cores the CPU is
    shared out too, and a logged load's dearer CPU per byte would read as
    WAL sharing: on this 2-core VM a COPY's logged step at 3 streams ran at
    0.70 of the unlogged rate where the real load at 2 streams lost only a
    few percent."""
    within = [p for p in points if p.streams <= max(1, cores)]
    return max(within or [min(points, key=lambda p: p.streams)], key=lambda p: p.streams)


def logged_top_s() -> float:
    """What the logged step takes of a budget."""
    return LOGGED_TOP_S + STEP_OVERHEAD_S + LOGGED_TOP_SETUP_S


def runs_at(k: int) -> bool:
    """Whether the step runs at k streams (MIN_STREAMS or more)."""
    return k >= MIN_STREAMS


def logged_top_need(max_streams: int, cores: int | None = None) -> float:
    """What the step adds to a probe's plan: its time when the probe may
    run MIN_STREAMS streams or more within the cores (default: this
    host's); else 0."""
    within = min(max_streams, usable_cores() if cores is None else cores)
    return logged_top_s() if runs_at(within) else 0.0


def rest_needs(max_streams: int) -> float:
    """What the rest of a probe needs beside its logged steps: the warm-up
    and the first two steps at their shortest (the curve's level and its
    first doubling)."""
    return plan_seconds(min(max_streams, 2))


def logged_top_reserve(budget_s: float, need_s: float, max_streams: int,
                       cores: int | None = None) -> float:
    """Seconds of the budget kept for the logged step: its time when the
    rest still holds need_s (the steps' plan, at its shortest) and the
    probe may run MIN_STREAMS streams or more within the cores (default:
    this host's); else 0."""
    need = logged_top_need(max_streams, cores)
    return need if need > 0 and budget_s - need >= need_s else 0.0


class LoggedTop:
    """The logged step, run between the steps and the WAL steps
    (`plan.steps_and_wal`'s `between`): `make_runner(schema, base)` gives
    the StepRunner over a source that loads regular tables named from base
    in schema, and the names it created (`tables()`).  `result`: the
    LoggedStep, None when it did not run (a note says why)."""

    def __init__(self, target: ConnTarget, make_runner: Callable[[str, str], StepRunner],
                 tables: Callable[[], list[str]], client_real: float | None,
                 notes: list[str], reserve_s: float) -> None:
        """reserve_s: the seconds kept for the step (0: it does not run,
        and no connection is made)."""
        self.target, self.make_runner, self.tables = target, make_runner, tables
        self.client_real, self.notes, self.reserve_s = client_real, notes, reserve_s
        self.result: LoggedStep | None = None
        self.conn: psycopg.Connection[Any] | None = None
        self.l0, self.t0 = 0.0, time.monotonic()
        if reserve_s <= 0:
            return
        try:
            self.conn = connect(target)
            self.conn.execute("SET default_transaction_read_only = off")
            self.conn.execute("SET lock_timeout = '5s'")
            self.l0 = wal_lsn(self.conn)
        except (ConnectError, psycopg.Error) as exc:
            self.close()
            notes.append(f"the step into logged tables was left out: {first_line(exc)}")

    def __call__(self, points: list[ProbePoint], deadline: float, end: float) -> None:
        """The step, after the steps (`points`): within `end`, the probe's
        own (a logged load slower than the reserve allowed for takes the WAL
        steps' time, not the step: it tells most at many streams; the WAL
        steps measure what they can in the rest); `deadline`, the end of
        the time kept for it, is not a limit."""
        del deadline
        if self.reserve_s <= 0:
            if points and runs_at(logged_count(points, usable_cores()).streams):
                self.notes.append("the budget was too short for a step into logged tables: "
                                  "what the restore's WAL costs many sessions is not "
                                  "measured")
            return
        if self.conn is None or not points:
            return
        top = logged_count(points, usable_cores())
        k = int(top.streams)
        if not runs_at(k):
            self.notes.append(f"the steps reached {k} stream(s) within the cores, under "
                              f"{MIN_STREAMS}: the step into logged tables (what many "
                              "sessions pay for the WAL) was left out")
            return
        background = max(0.0, (wal_lsn(self.conn) - self.l0)
                         / max(time.monotonic() - self.t0, 1e-3))
        schema = self._schema()
        if schema is None:
            return
        base = f"{BASE_PREFIX}{os.getpid()}_{secrets.token_hex(3)}"
        conn = self.conn
        per_stream = (top.probe_bytes_per_s or top.bytes_per_s) / k
        try:
            step = run_logged(self.make_runner(schema, base), k, per_stream, end,
                              lambda: wal_lsn(conn), background, self.notes,
                              "the step into logged tables",
                              "what the restore's WAL costs many sessions is not measured")
        finally:
            self._drop()
        if step is None:
            return
        if self.client_real is not None:
            step = dataclasses.replace(step, point=as_pg_restore([step.point],
                                                                 self.client_real)[0][0])
            top = as_pg_restore([top], self.client_real)[0][0]
        self.result = step
        self.notes.append(self.note(top))

    def note(self, top: ProbePoint) -> str:
        assert self.result is not None
        p, w = self.result.point, self.result.wal_per_byte
        return (f"{p.streams} stream(s) into logged tables: {fmt.rate(p.bytes_per_s)} of heap "
                f"against {fmt.rate(top.bytes_per_s)} into temporary ones "
                f"({p.bytes_per_s / top.bytes_per_s:.2f}x); "
                + (f"{w:.2f} B of WAL a heap byte" if w is not None else "no WAL read")
                + (f" (the server's own {fmt.rate(self.result.background_wal_bytes_per_s)} "
                   "of WAL taken out)" if self.result.background_wal_bytes_per_s > 0 else ""))

    def _schema(self) -> str | None:
        """The current schema when this role may create tables in it; None
        with a note otherwise."""
        assert self.conn is not None
        try:
            row = self.conn.execute(
                "SELECT current_schema(), coalesce(has_schema_privilege(current_schema(), "
                "'CREATE'), false)").fetchone()
        except psycopg.Error as exc:
            self.notes.append(f"the step into logged tables was left out: {first_line(exc)}")
            return None
        if row is None or row[0] is None or not row[1]:
            what = ("no current schema (search_path)" if row is None or row[0] is None
                    else f"no CREATE privilege on schema {row[0]}")
            self.notes.append(f"the step into logged tables was left out: {what}; what the "
                              "restore's WAL costs many sessions is not measured")
            return None
        return str(row[0])

    def _drop(self) -> None:
        assert self.conn is not None
        for name in self.tables():
            drop_scratch(self.conn, name)

    def __enter__(self) -> LoggedTop:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def run_logged(steps: StepRunner, k: int, per_stream: float, deadline: float,
               lsn: Callable[[], float], background: float, notes: list[str], name: str,
               lost: str) -> LoggedStep | None:
    """k streams of `steps` (its `before_step` still runs first) for
    LOGGED_TOP_S in RANGES_A_STREAM ranges a stream at per_stream (bytes/s),
    the WAL insert position (`lsn`) read when the sessions are about to start
    and after they end; its scratch directory removed after it.  None, with
    a note ("{name} ran into the budget ...: {lost}", "{name} failed (...):
    {lost}"), when it ran into the deadline or failed: a failure of this
    step alone loses it only, the steps stand.  The restore's and the COPY
    load's step into logged tables both run through here."""
    marks: list[tuple[float, float]] = []
    first = steps.before_step

    def mark(n: int) -> None:
        if first is not None:
            first(n)
        marks.append((lsn(), time.monotonic()))

    steps.before_step = mark
    try:
        p = steps.run_step(k, LOGGED_TOP_S, per_stream * LOGGED_TOP_S / RANGES_A_STREAM,
                           deadline)
        l1, t1 = lsn(), time.monotonic()
    except Aborted:
        notes.append(f"{name} ran into the budget and was dropped: {lost}")
        return None
    except (ProbeError, OSError, psycopg.Error) as exc:
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        notes.append(f"{name} failed ({first_line(what)}): {lost}")
        return None
    finally:
        shutil.rmtree(steps.scratch, ignore_errors=True)
    l0, t0 = marks[0]
    return LoggedStep(p, l1 - l0, t1 - t0, background)


def first_line(exc: object) -> str:
    """An error's first line, redacted (a server's message may quote a
    conninfo), or its type's name when it says nothing."""
    text = str(exc).strip()
    return redact_text(text.splitlines()[0]) if text else type(exc).__name__


# the logged step ran under this share of the temporary tables' rate at its
# count: the logged load is what flattens the curve, and it is named so
KEPT_PACE = 0.9


def logged_contention(res: Any) -> float | None:
    """s of the logged load: the probe's step into logged tables at k
    streams (restore: `LoggedTop`; COPY: `copyload._logged_top_step`) ran
    at L(k) where the steps without WAL (temporary or unlogged tables, a
    COPY's read with its one-stream logged cost) took X(k), read as each
    stream slowed by a share s for every other stream loading logged tables
    beside it: L(n) = X(n) / (1 + s (n - 1)), s = (X(k) / L(k) - 1) / (k - 1)
    (at least 0).  The serial part of the universal scalability law: what
    the sessions share when they write WAL (its insertion, the flushes each
    COPY's ring waits for) costs more the more of them share it, and one
    stream alone pays next to nothing (a 16-core host's restore at -j 1 ran
    at the temporary tables' one-stream rate).  None without the step, or
    with it under MIN_STREAMS streams."""
    top = getattr(res, "logged_top", None)
    if top is None or not runs_at(top.point.streams) or top.point.bytes_per_s <= 0:
        return None
    k = int(top.point.streams)
    same = res.point(k)
    if same is None or same.bytes_per_s <= 0:
        return None
    return max(0.0, (same.bytes_per_s / top.point.bytes_per_s - 1.0) / (k - 1))


def as_logged_load(res: Any) -> tuple[Any, str | None]:
    """(the probe's steps as loads into logged tables run them: each step of
    n streams at 1 / (1 + s (n - 1)) of its rate, `logged_contention`; what
    limits the curve when the logged step ran under KEPT_PACE of the
    temporary tables' rate, else None).  The result as it is without a
    logged step."""
    s = logged_contention(res)
    if s is None:
        return res, None
    top = res.logged_top
    k = int(top.point.streams)
    r = top.point.bytes_per_s / res.point(k).bytes_per_s
    out = res.slowed_by(lambda n: 1.0 / (1.0 + s * (n - 1)))
    if r >= KEPT_PACE:
        return out, None
    return out, (f"the WAL-logged load ({k} streams loaded logged tables at "
                 f"{fmt.rate(top.point.bytes_per_s)}, {r:.0%} of the rate without WAL: "
                 f"each stream {s:.1%} slower for every other)")


def unmeasured(probe_json: dict[str, Any] | None, jobs: int,
               cores: int | None = None) -> str | None:
    """Why a restore's predictions up to `jobs` may be short: the probe ran
    but loaded no logged table (no CREATE on the schema, the budget, a
    failure: its note says which) on a host where the step would run
    (MIN_STREAMS cores or more), and `jobs` reaches MIN_STREAMS. None
    otherwise (no probe, the step measured, or too few jobs or cores for
    sharing the WAL to show)."""
    cores = usable_cores() if cores is None else cores
    if probe_json is None or probe_json.get("logged_top") or not probe_json.get("points"):
        return None
    if not runs_at(min(jobs, cores)):
        return None
    why = next((str(n) for n in probe_json.get("notes") or [] if "logged tables" in str(n)),
               None)
    return (f"the probe loaded no logged table ({why or 'the step did not run'}), so the "
            "predictions leave out what sharing the WAL costs the restore's loads, which "
            f"grows with the jobs: at -j {MIN_STREAMS} and more they may be short (a 16-core "
            "host's restore loaded at 0.77x the probe's temporary tables at -j 8, 0.50x at "
            "-j 16)")
