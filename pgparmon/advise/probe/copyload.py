"""The COPY load probe (`run_copy_probe`): X(k) of k parallel ``COPY FROM``
streams of one file into one table (docs/advise.md, "COPY loads").

The file is checked before anything runs (`copyfile.check_copy_file`): not binary,
its first records split the way the table has columns.  The probe then
uses the dump and restore probes' streams and steps: each stream is a psql
session that runs ``\\copy scratch FROM PROGRAM 'dd ... skip=A count=B'``
for slices of the file, cut on record boundaries (`record_end`), into one
scratch table, ``CREATE UNLOGGED TABLE <schema>.pgparmon_probe_<x> (LIKE T
INCLUDING DEFAULTS INCLUDING GENERATED)`` with T's indexes (never unique:
a small file is loaded more than once).  The scratch table is emptied
before each step and dropped at the end, also on an error or Ctrl-C.

When T is logged, one more step (`_logged_step`) loads the next slices by
one stream into a second, LOGGED scratch table (the same clone, created
for the step and dropped after it): what a stream's own WAL costs it
(records assembled and inserted, the flushes its bulk-write ring waits
for), and the WAL a file byte makes (the WAL insert position's progress,
less the server's own WAL rate read over the unlogged steps).  `as_logged`
carries both into the model: the unlogged steps as loads into T would run.

When T has indexes, one more step (`_grown_step`) loads the next slices by
one stream into the unlogged scratch table while it still holds what the
last step loaded (no TRUNCATE before it): the rate into a grown index,
against the first one-stream step's into an empty one.  `indexgrowth`
turns the two into the load's rate over its indexes' growth (a real load
fills T's indexes as it goes; each step's start from empty ones does not).

The work unit is the file's byte (ProbePoint.heap_bytes holds file bytes).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from ...connect import ConnTarget, connect
from ... import units as fmt
from .plan import (
    check_args,
    cpu_note,
    probe_device,
    steps_and_wal,
    usable_cores,
)
from .psql import checked_psql, is_local_host, psql_env
from .restore_ranges import index_on_temp
from .copyfile import CopyFile, record_end
from .indexgrowth import MIN_LEVER, lever
from .results import (
    GrownStep,
    LoggedStep,
    ProbeError,
    ProbePoint,
    ProbeResult,
    WalPoint,
    qualified_name,
)
from .loggedtop import (
    first_line,
    logged_count,
    logged_top_reserve,
    rest_needs,
    run_logged,
    runs_at,
)
from .scratch import drop_scratch
from .steps import STEP_OVERHEAD_S, Aborted, StepRunner
from .streams import Range, Stream
from .walstep import wal_lsn

SCRATCH_PREFIX = "pgparmon_probe_"
# A slice is never smaller than this (a range per few kB would measure psql).
MIN_SLICE = 64 * 1024
# The file's name in the scratch directory: the slices' dd reads it there.
INPUT_LINK = "input.dat"
# The logged step: one stream, one COPY of about this many seconds of the
# unlogged rate (a real load runs one COPY a stream: its bulk-write ring of
# 16 MB fills and wraps, and each dirty buffer it hands back waits for the
# WAL up to its change to be flushed; slices of a fraction of a second
# would each start with a fresh ring).  LOGGED_SETUP_S: its table and
# indexes created and dropped.
LOGGED_STEP_S = 1.0
LOGGED_SETUP_S = 0.2
# The grown step: one stream, one COPY of about this many seconds at the
# one-stream rate into the empty table (a grown index makes it slower).
# Short, so that a 10 s budget still holds it beside the logged step.
GROWN_STEP_S = 0.6


def logged_step_s() -> float:
    """What the logged step takes of a budget: its COPY at up to half the
    unlogged rate, a session's start and its table's set-up."""
    return 2 * LOGGED_STEP_S + STEP_OVERHEAD_S + LOGGED_SETUP_S


def grown_step_s() -> float:
    """What the grown step takes of a budget: its COPY at up to half the
    empty table's rate and a session's start."""
    return 2 * GROWN_STEP_S + STEP_OVERHEAD_S


def logged_reserve(budget_s: float, max_streams: int, logged: bool) -> float:
    """Seconds of a probe's budget kept for the logged step: its time when
    the table is logged and the rest of the budget still holds the plan's
    warm-up and first two steps (`loggedtop.rest_needs`: the curve's level
    and its first doubling).  It comes before the later doublings and the
    WAL steps: a stream's own WAL cost is in every prediction, the WAL's
    ceiling binds only at many streams.  Else 0."""
    if not logged or budget_s - logged_step_s() < rest_needs(max_streams):
        return 0.0
    return logged_step_s()


def grown_reserve(budget_s: float, max_streams: int, indexed: bool, kept: float) -> float:
    """Seconds of a probe's budget kept for the grown step: its time when
    the table has indexes and the rest of the budget (less `kept`, the
    logged step's) still holds the plan's warm-up and first two steps, as
    `logged_reserve`: the indexes' growth is in every prediction.  Else 0."""
    if not indexed or budget_s - kept - grown_step_s() < rest_needs(max_streams):
        return 0.0
    return grown_step_s()


def top_reserve(budget_s: float, max_streams: int, logged: bool, kept: float) -> float:
    """Seconds of a probe's budget kept for the step of its most streams
    into the logged table (`_logged_top_step`): its time when the logged
    step runs and the rest of the budget (less `kept`, the logged and
    grown steps') still holds the plan's warm-up and first two steps, as
    `logged_reserve`.  It comes last of the three: a stream's own costs
    are in every prediction, the shared WAL's only at many streams."""
    if not logged:
        return 0.0
    return logged_top_reserve(budget_s - kept, rest_needs(max_streams), max_streams)


@dataclass(frozen=True)
class TargetTable:
    """The table to load: its schema and name, columns COPY fills, the
    CREATE INDEX text of its indexes, and whether it is logged."""

    schema: str
    relname: str
    columns: int
    indexes: list[str] = field(default_factory=list)
    logged: bool = True
    rows: float | None = None  # pg_class.reltuples

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.relname}"


class CopySource:
    """Slices of the file, in order, each about the bytes asked for and cut
    on a record boundary; after the last one, from the start again
    (`reused`)."""

    def __init__(self, cf: CopyFile, link: str, table_sql: str, dd: str) -> None:
        self.cf = cf
        self.link = link
        self.table_sql = table_sql
        self.dd = dd
        self.pos = cf.data_start
        self.reused = False
        self.slices = 0
        self.loaded = 0.0  # file bytes the slices finished since `emptied`
        self.f = open(cf.path, "rb")  # noqa: SIM115 (closed in close())
        opts = "FORMAT csv" if cf.fmt == "csv" else "FORMAT text"
        self.opts = opts

    def close(self) -> None:
        self.f.close()

    def take(self, s: Stream, want_bytes: float) -> Range:
        if self.pos >= self.cf.size:
            self.pos = self.cf.data_start
            self.reused = True
        start = self.pos
        end = record_end(self.f, start, int(max(MIN_SLICE, want_bytes)), self.cf.size,
                         self.cf.fmt == "csv")
        self.pos = end
        self.slices += 1
        cmd = (f"{self.dd} if={self.link} iflag=skip_bytes,count_bytes skip={start} "
               f"count={end - start} bs=1M status=none")
        script = f"\\copy {self.table_sql} FROM PROGRAM '{cmd}' WITH ({self.opts})"
        return Range(os.path.basename(self.cf.path), script, heap=float(end - start), owner=s)

    def finish(self, r: Range) -> None:
        self.loaded += r.heap

    def emptied(self) -> None:
        """The table the slices load into was emptied."""
        self.loaded = 0.0


def scratch_name() -> str:
    return f"{SCRATCH_PREFIX}{os.getpid()}_{secrets.token_hex(3)}"


def run_copy_probe(target: ConnTarget, cf: CopyFile, table: TargetTable, *,
                   budget_s: float, max_streams: int,
                   max_wal_size: float | None = None) -> ProbeResult:
    """Measure X(k) (file bytes per second, all streams) of k parallel COPY
    FROM streams of cf into a scratch clone of `table`, within budget_s
    seconds.  The scratch tables (and their indexes) are dropped at the end,
    whatever happened; the target table is only read (LIKE).  The steps'
    scratch table is unlogged: when `table` is logged (and the budget
    allows), one stream is measured into a logged clone (`_logged_step`)
    and the WAL's own ceiling after that (`walstep`)."""
    t_start = time.monotonic()
    check_args(budget_s, max_streams)
    psql = checked_psql()
    dd = _dd()
    env = psql_env(target, statement_timeout_ms=int((budget_s + 30) * 1000), read_only=False)
    notes: list[str] = []
    device = probe_device(cf.path, notes)
    scratch_sql = qualified_name(table.schema, scratch_name())
    conn = connect(target)
    dropping: list[str] = []  # scratch tables to drop (named before they are created)
    done = False
    wal: list[WalPoint] = []
    logged: LoggedStep | None = None
    grown: GrownStep | None = None
    logged_top: LoggedStep | None = None
    dirs: list[str] = []
    source: CopySource | None = None
    try:
        with conn.cursor() as cur:
            cur.execute("SET default_transaction_read_only = off")
            cur.execute("SET lock_timeout = '5s'")
            cur.execute(f"SET statement_timeout = {int((budget_s + 30) * 1000)}")
            dropping.append(scratch_sql)
            built = _create_scratch(cur, table, scratch_sql, unlogged=True)
        if table.indexes:
            notes.append(f"index maintenance measured: the scratch table has {built} of the "
                         f"table's {len(table.indexes)} index(es) (none unique)")
        notes.append("the scratch table is unlogged: the load's own WAL is not in the steps")
        dirs.append(_linked_input(cf.path))
        source = CopySource(cf, INPUT_LINK, scratch_sql, dd)

        def empty(_k: int) -> None:
            conn.execute(f"TRUNCATE {scratch_sql}")
            assert source is not None
            source.emptied()

        def runner(scratch_dir: str, before: Any) -> StepRunner:
            assert source is not None
            return StepRunner(psql=psql, comp=None, env=env, scratch=scratch_dir, source=source,
                              device=device, local=is_local_host(env.get("PGHOST")),
                              connect_timeout_s=float(target.connect_timeout_s),
                              before_step=before)

        steps = runner(dirs[0], empty)
        log_s = logged_reserve(budget_s, max_streams, table.logged)
        grow_s = grown_reserve(budget_s, max_streams, built > 0, log_s)
        between = _Between(conn, table, cf, source, runner, dirs, dropping, notes, log_s,
                           grow_s, built > 0,
                           top_reserve(budget_s, max_streams, log_s > 0, log_s + grow_s))
        points, wal, plan = steps_and_wal(steps, dirs[0], notes, t_start, budget_s,
                                          max_streams, target, max_wal_size,
                                          wal=table.logged,
                                          reserve_s=between.log_s + between.grow_s
                                          + between.top_s, between=between)
        logged, grown, logged_top = between.logged, between.grown, between.logged_top
        if source.reused:
            notes.append("the file was loaded more than once (it is small): the page cache "
                         "helped the reads")
        cpu_note(steps, points, notes)
        done = True
    except psycopg.Error as exc:
        first = first_line(exc)
        raise ProbeError(f"the probe could not prepare its scratch table: {first}") from None
    finally:
        _clean_up(conn, source, dirs, dropping, done)
    return ProbeResult(points=points, seconds=time.monotonic() - t_start, budget_s=budget_s,
                       compression="none", ratio=None, device=device, notes=notes, wal=wal,
                       skipped=plan.skipped, logged=logged, grown=grown,
                       logged_top=logged_top)


class _Between:
    """What runs after the unlogged steps, before the WAL's ceiling: the
    grown step (grow_s seconds kept for it; `grown` its result), then the
    step into a logged clone (log_s seconds; `logged`), with the WAL the
    server wrote of its own over the steps (from this object's making to
    its call) taken out."""

    def __init__(self, conn: psycopg.Connection[Any], table: TargetTable, cf: CopyFile,
                 source: CopySource, runner: Any, dirs: list[str], dropping: list[str],
                 notes: list[str], log_s: float, grow_s: float = 0.0,
                 indexed: bool = False, top_s: float = 0.0) -> None:
        self.conn, self.table, self.cf, self.source = conn, table, cf, source
        self.runner, self.dirs, self.dropping, self.notes = runner, dirs, dropping, notes
        self.log_s, self.grow_s, self.indexed, self.top_s = log_s, grow_s, indexed, top_s
        self.logged: LoggedStep | None = None
        self.grown: GrownStep | None = None
        self.logged_top: LoggedStep | None = None
        self.l0, self.t0 = _wal_lsn(conn), time.monotonic()

    def __call__(self, points: list[ProbePoint], deadline: float, end: float) -> None:
        conn, table = self.conn, self.table
        background = max(0.0, (_wal_lsn(conn) - self.l0)
                         / max(time.monotonic() - self.t0, 1e-3))
        one = next((p for p in points if p.streams == 1), None)
        if self.grow_s > 0 and one is not None:
            self.dirs.append(_linked_input(self.cf.path))
            self.grown = _grown_step(self.runner, self.dirs[-1], one, self.source,
                                     deadline - self.log_s - self.top_s, self.notes)
        elif self.indexed:
            self.notes.append("the budget was too short for a step into a grown index: the "
                              "cost of the indexes' growth over the load is not measured")
        if self.log_s > 0 and one is not None:
            logged_sql = qualified_name(table.schema, scratch_name())
            self.dropping.append(logged_sql)
            with conn.cursor() as cur:
                _create_scratch(cur, table, logged_sql, unlogged=False)
            self.dirs.append(_linked_input(self.cf.path))
            self.source.table_sql = logged_sql
            self.logged = _logged_step(conn, self.runner, self.dirs[-1], one, background,
                                       deadline - self.top_s, self.notes)
            top = logged_count(points, usable_cores())
            if self.logged is not None and self.top_s > 0 and runs_at(top.streams):
                self.dirs.append(_linked_input(self.cf.path))
                self.logged_top = _logged_top_step(conn, self.runner, self.dirs[-1], top,
                                                   (logged_sql, self.source), background,
                                                   max(deadline, end), self.notes)
            drop_scratch(conn, logged_sql)
        elif table.logged:
            self.notes.append("the budget was too short for a step into a logged table: each "
                              "stream's cost of writing WAL is not measured")


_wal_lsn = wal_lsn  # a name of this module's own: a test interrupts the probe through it


def _create_scratch(cur: psycopg.Cursor[Any], table: TargetTable, scratch_sql: str,
                    unlogged: bool) -> int:
    """A scratch clone of `table` with its indexes (none unique); how many
    indexes were built.  LIKE reads T's definition under an AccessShareLock
    only (what a SELECT takes): it waits for nothing but an ALTER/DROP of T,
    and blocks nothing but those."""
    cur.execute(f"CREATE {'UNLOGGED ' if unlogged else ''}TABLE {scratch_sql} (LIKE "
                f"{qualified_name(table.schema, table.relname)} "
                "INCLUDING DEFAULTS INCLUDING GENERATED)")
    return _scratch_indexes(cur, table.indexes, scratch_sql)


def _logged_step(conn: psycopg.Connection[Any], runner: Any, scratch_dir: str,
                 one: ProbePoint, background: float, deadline: float,
                 notes: list[str]) -> LoggedStep | None:
    """One stream into the logged scratch table (the source already points
    at it): one slice of LOGGED_STEP_S at the unlogged one-stream rate; the
    WAL insert position read before its session starts and after it ends.
    None (with a note) when it ran into the deadline."""
    marks: list[tuple[float, float]] = []

    def mark(_k: int) -> None:
        marks.append((_wal_lsn(conn), time.monotonic()))

    p = _one_stream(runner, scratch_dir, mark, LOGGED_STEP_S, one.bytes_per_s, deadline,
                    notes, "the step into a logged table ran into the budget and was dropped: "
                    "each stream's cost of writing WAL is not measured")
    if p is None:
        return None
    l1, t1 = _wal_lsn(conn), time.monotonic()
    l0, t0 = marks[0]
    step = LoggedStep(p, l1 - l0, t1 - t0, background)
    w = step.wal_per_byte
    notes.append(f"1 stream into a logged table: {fmt.rate(p.bytes_per_s)} of file against "
                 f"{fmt.rate(one.bytes_per_s)} into the unlogged one; "
                 + (f"{w:.2f} B of WAL a byte of file" if w is not None else "no WAL read")
                 + (f" (the server's own {fmt.rate(background)} of WAL taken out)"
                    if background > 0 else ""))
    return step


def _logged_top_step(conn: psycopg.Connection[Any], runner: Any, scratch_dir: str,
                     top: ProbePoint, table: tuple[str, CopySource], background: float,
                     deadline: float, notes: list[str]) -> LoggedStep | None:
    """The most streams the steps reached, once more into the logged scratch
    table (emptied first, as each step's table is): LOGGED_TOP_S of slices
    at the unlogged rate, the WAL insert position read before its sessions
    start and after they end (`probe.loggedtop`: what many sessions pay for
    writing WAL together).  Its deadline is the probe's end: a slow step
    takes the WAL steps' time (they measure what they can in the rest),
    as the step that tells most at many streams.  None (with a note) when
    it ran into the deadline."""
    logged_sql, source = table

    def before(_k: int) -> None:
        conn.execute(f"TRUNCATE {logged_sql}")
        source.emptied()

    k = int(top.streams)
    step = run_logged(runner(scratch_dir, before), k, top.bytes_per_s / k, deadline,
                      lambda: _wal_lsn(conn), background, notes,
                      f"the step of {k} streams into a logged table",
                      "what many sessions pay for writing WAL is not measured")
    if step is not None:
        notes.append(f"{k} streams into a logged table: {fmt.rate(step.point.bytes_per_s)} of "
                     f"file against {fmt.rate(top.bytes_per_s)} into the unlogged one")
    return step


def _one_stream(runner: Any, scratch_dir: str, before: Any, step_s: float, rate: float,
                deadline: float, notes: list[str], dropped: str) -> ProbePoint | None:
    """One stream, one slice of step_s seconds at `rate` (file bytes/s), in
    scratch_dir (removed after it); None with the note `dropped` when it ran
    into the deadline."""
    steps = runner(scratch_dir, before)
    try:
        return steps.run_step(1, step_s, rate * step_s, deadline)
    except Aborted:
        notes.append(dropped)
        return None
    except OSError as exc:
        raise ProbeError(f"the probe failed: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


def _grown_step(runner: Any, scratch_dir: str, one: ProbePoint, source: CopySource,
                deadline: float, notes: list[str]) -> GrownStep | None:
    """One stream into the unlogged scratch table as the last step left it
    (no TRUNCATE before it): one slice of GROWN_STEP_S at the one-stream
    rate.  None (with a note) when the table holds too little for a slope
    (`indexgrowth.lever` under MIN_LEVER) or the step ran into the
    deadline."""
    before = source.loaded
    if lever(one.heap_bytes, before, one.heap_bytes) < MIN_LEVER:
        shutil.rmtree(scratch_dir, ignore_errors=True)
        notes.append(f"the steps left {fmt.size(before)} in the scratch table, too little "
                     f"beside the one-stream step's {fmt.size(one.heap_bytes)}: the cost "
                     "of the indexes' growth over the load is not measured")
        return None
    p = _one_stream(runner, scratch_dir, None, GROWN_STEP_S, one.bytes_per_s, deadline,
                    notes, "the step into a grown index ran into the budget and was dropped: "
                    "the cost of the indexes' growth over the load is not measured")
    if p is None:
        return None
    notes.append(f"1 stream into the scratch table holding {fmt.size(before)} of file: "
                 f"{fmt.rate(p.bytes_per_s)} against {fmt.rate(one.bytes_per_s)} into the "
                 "empty one (the indexes' growth)")
    return GrownStep(p, before)


def as_logged(res: ProbeResult) -> ProbeResult:
    """The probe's unlogged steps as loads into the logged table would run
    them, from its logged step: each step's time divided by r, the logged
    step's rate over the unlogged one-stream step's (at most 1: a stream
    that also writes WAL is never faster), and its backends' CPU times the
    ratio of their CPU per byte (at least 1).  Each stream pays its own
    WAL's cost (records, CRCs, the flushes its ring waits for), as a second
    stream pays it again; what the streams share (WAL insertion and the
    flushes of all of them) is the WAL step's ceiling.  The result as it is
    without a logged step (or a one-stream step to compare it with)."""
    lg, one, r = res.logged, res.point(1), logged_cost(res)
    if lg is None or one is None or not r:
        return res
    c = 1.0
    if (lg.point.server_cpu_s and one.server_cpu_s and lg.point.heap_bytes > 0
            and one.heap_bytes > 0):
        c = max(1.0, (lg.point.server_cpu_s / lg.point.heap_bytes)
                / (one.server_cpu_s / one.heap_bytes))
    return res.slowed(r, c)


def logged_cost(res: ProbeResult) -> float | None:
    """X_logged(1) / X_unlogged(1) as `as_logged` takes it; None when not
    measured."""
    lg, one = res.logged, res.point(1)
    if lg is None or one is None or one.bytes_per_s <= 0:
        return None
    return min(1.0, lg.point.bytes_per_s / one.bytes_per_s)


def _dd() -> str:
    """The dd the slices' scripts run: its path, or plain "dd" (PATH finds
    it) when the path would need quoting in psql's shell."""
    dd = shutil.which("dd")
    if dd is None:
        raise ProbeError("the COPY probe cuts the file with dd, which is not installed")
    if not re.match(r"^[A-Za-z0-9_./+-]+$", dd):
        dd = "dd"  # a path psql's shell would need quoted: PATH finds it
    return dd


def _scratch_indexes(cur: psycopg.Cursor[Any], indexes: list[str], scratch_sql: str) -> int:
    """The table's indexes built on the scratch table (none unique: see
    index_on_temp); how many were."""
    built = 0
    for stmt in indexes:
        ix = index_on_temp(stmt, scratch_sql)
        if ix is None:
            continue
        cur.execute(ix)
        built += 1
    return built


def _linked_input(path: str) -> str:
    """A new scratch directory holding INPUT_LINK, a link to the file at
    `path` (the name the slices' dd reads); ProbeError (the directory then
    removed) when it cannot be made."""
    scratch_dir: str | None = None
    try:
        scratch_dir = tempfile.mkdtemp(prefix="pgparmon-copy-probe-")
        os.symlink(os.path.abspath(path), os.path.join(scratch_dir, INPUT_LINK))
    except OSError as exc:
        if scratch_dir is not None:
            shutil.rmtree(scratch_dir, ignore_errors=True)
        raise ProbeError(f"cannot make a scratch directory: {exc.strerror or exc}") \
            from None
    return scratch_dir


def _clean_up(conn: psycopg.Connection[Any], source: CopySource | None,
              scratch_dirs: list[str], scratch_sqls: list[str], done: bool) -> None:
    """The probe's input closed, its scratch directories removed, its
    scratch tables (those named in scratch_sqls: DROP IF EXISTS) dropped and
    its connection closed.  A failed DROP is raised only after a probe that
    succeeded (done): otherwise the error in flight says more."""
    if source is not None:
        source.close()
    for d in scratch_dirs:
        shutil.rmtree(d, ignore_errors=True)
    try:
        failed: ProbeError | None = None
        for name in scratch_sqls:
            try:
                drop_scratch(conn, name)
            except ProbeError as exc:
                failed = failed or exc
        if failed is not None and done:
            raise failed
    finally:
        conn.close()
