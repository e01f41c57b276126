"""vacuumdb's work list: its rounds and the tables of each, as vacuumdb
itself makes them.

A round is one pass over one database's tables: vacuumdb connects, lists
the tables (ORDER BY relpages DESC), hands the next one to whichever of
its -j connections is free, and waits for the last before it moves on.
`-a` makes one round per database (by name), --analyze-in-stages three per
database, the stage outermost (every database at 1 target, then at 10,
then at the default). A table is an item of each round it is in.

Each item is sized in bytes of what its statement reads: a VACUUM its heap
and TOAST pages, an ANALYZE its sample (300 rows per statistics target,
at most one block each: min(pages, 300 x target) blocks, as
pg_stat_progress_analyze's sample_blks_total says; the target the largest
set on one of its columns or extended statistics, and the round's when a
column takes the default: bounded by the sample, not the table). Its order key is
the relpages vacuumdb sorted by when the round began: the catalog's at the
plan for a database's first round, its true size after a stage's ANALYZE
set relpages (a never-vacuumed table's 0 is its file's size).

Pure: built from the plan's inputs (PlanInputs.extra, read once and
recorded) and the command line.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..analyze.items import Item
from .vacuumdb_options import ANALYZE, STAGE_TARGETS, VACUUM_FULL, VacOptions, name_parts

if TYPE_CHECKING:
    from ..analyze.progress import Tracker

# ANALYZE samples 300 rows per unit of statistics target, from as many blocks
SAMPLE_ROWS_PER_TARGET = 300
# and never fewer rows than this (do_analyze_rel's floor: every column's target 0)
MIN_SAMPLE_ROWS = 100
DEFAULT_TARGET = 100
# tables ANALYZE skips (the statistics never show it ran)
NO_ANALYZE = ("pg_catalog.pg_statistic",)
# tables vacuumdb takes when no -t names them
DEFAULT_KINDS = ("r", "m")
# columns of a row of sql/vacuumdb_tables_*.sql
OID, NSP, REL, KIND, RELPAGES, RELTUPLES, TOAST_PAGES, PATH, TOAST_OID, PART_PAGES, \
    XID_AGE, MXID_AGE, LAST_VACUUM, LAST_ANALYZE, LAST_AUTOANALYZE, SET_TARGET, \
    DEFAULT_COLS = range(17)


@dataclass
class Round:
    db: str
    stage: int | None  # --analyze-in-stages: 0, 1, 2; None: no stages
    keys: list[str] = field(default_factory=list)  # its items, in vacuumdb's order
    start: float | None = None  # server time its first session began (once seen)
    seen: float | None = None  # server time one of its sessions was last seen
    cursor: int = 0  # its items before this were handed out (order evidence)
    floor: float | None = None  # the smallest size of its items known handed out


@dataclass(frozen=True)
class Parts:
    """An item's table and its work's parts, in bytes, in the order its
    statement does them: the heap, its TOAST table, the ANALYZE sample."""

    db: str
    oid: int
    toast_oid: int | None
    heap: float
    toast: float
    sample: float
    # the most blocks its ANALYZE samples (300 rows per unit of its target, a
    # block each), whatever the table's size; 0: no ANALYZE, or not known
    cap: float = 0.0


# the last observations each part's rate is measured on
RATE_WINDOW = 120
HEAP, SAMPLE = "heap", "sample"


@dataclass
class PartRates:
    """Bytes per second one session reads in each part of the work: a
    VACUUM's heap (and TOAST) scan, an ANALYZE's sample. They differ: under
    the cost-based delay a block costs what the buffer access costs
    (vacuum_cost_page_hit / _miss, and _dirty when the block is written),
    and a VACUUM's first pass after a load dirties every page (hint bits,
    the visibility map) while the ANALYZE after it reads the same pages
    clean, an order of magnitude cheaper. Measured on the same item seen in
    the same part at two samples in a row."""

    seen: dict[str, tuple[float, float, str]] = field(default_factory=dict)  # item key ->
    # (wall time, done, part) at its last sample
    steps: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)  # part ->
    # (bytes, seconds) of its last observations

    def observe(self, key: str, ts: float, done: float, part: str | None) -> None:
        prev = self.seen.get(key)
        if part is None:  # between its parts (its indexes): its last part's stays
            return
        self.seen[key] = (ts, done, part)
        if prev is not None and prev[2] == part and ts > prev[0] and done >= prev[1]:
            self.steps.setdefault(part, deque(maxlen=RATE_WINDOW)).append(
                (done - prev[1], ts - prev[0]))

    def finished(self, key: str, wall: float | None, heap: float, work: float) -> None:
        """An item seen scanning its heap, or sampling, at its last sample
        is done: (the rest of) its sample ran in between, too short to be
        seen twice (a sample after its heap scan is cheap). The heap's rest
        at the heap's rate, the sample half of what is left of that time
        (its end lies anywhere in it)."""
        prev = self.seen.pop(key, None)
        r_heap = self.rate(HEAP)
        if prev is None or wall is None or (prev[2] == HEAP and r_heap is None):
            return
        # seen sampling once: the rest of its sample took part of the time since
        sample = work - max(prev[1], heap)
        spare = wall - prev[0] - (max(0.0, heap - prev[1]) / r_heap if r_heap else 0.0)
        if sample > 0 and spare > 0:
            self.steps.setdefault(SAMPLE, deque(maxlen=RATE_WINDOW)).append(
                (sample, spare / 2))

    def rate(self, part: str) -> float | None:
        """The part's bytes per second per session, once measured."""
        obs = self.steps.get(part) or ()
        b, t = sum(x[0] for x in obs), sum(x[1] for x in obs)
        return b / t if b > 0 and t > 0 else None


@dataclass
class VacState:
    """What the driver keeps about one vacuumdb job, once planned (its
    state, VacHolder, holds it)."""

    opts: VacOptions
    rounds: list[Round] = field(default_factory=list)
    parts: dict[str, Parts] = field(default_factory=dict)
    round_of: dict[str, int] = field(default_factory=dict)  # item key -> round
    by_oid: dict[tuple[int, str, int], str] = field(default_factory=dict)  # (round, db, oid)
    by_name: dict[tuple[int, str, str], str] = field(default_factory=dict)  # (round, db, rel)
    # (db, oid) -> (last vacuum, last analyze) by hand, server time, at the plan
    stats: dict[tuple[str, int], tuple[float | None, float | None]] = field(default_factory=dict)
    cur: int | None = None  # the round running now
    uncertain: bool = False  # attached mid --analyze-in-stages: the stage was a guess
    inferred: bool = False  # no command line: the statement and tables were guessed
    sessions: dict[int, tuple[float | None, int]] = field(default_factory=dict)  # pid ->
    # (backend_start, round)
    stmts: dict[int, tuple[float | None, str | None]] = field(default_factory=dict)  # pid ->
    # (query_start, item key) of its statement
    unmapped: bool = False  # this sample: a session of the round on a table not named
    max_sessions: int = 0
    unread: list[str] = field(default_factory=list)  # databases whose tables were not read
    evidence: bool = False  # the statistics read at the end show this run
    rates: PartRates = field(default_factory=PartRates)


def stage_target(opts: VacOptions, stage: int | None, default: int) -> int:
    """The statistics target an ANALYZE of this stage samples for."""
    if stage is None:
        return default
    return STAGE_TARGETS[stage] or default


def table_target(row: list[Any], target: int) -> int:
    """The statistics target one table's ANALYZE samples for: the largest
    of the targets set on its columns or its extended statistics, and the
    round's (`target`: the default, or the stage's) when a column takes
    the default (a row without those columns, recorded before: the round's)."""
    if len(row) <= DEFAULT_COLS:
        return target
    explicit = int(row[SET_TARGET]) if row[SET_TARGET] is not None else 0
    return max(explicit, target if row[DEFAULT_COLS] else 0)


def sample_cap(row: list[Any], opts: VacOptions, target: int) -> float:
    """The most blocks one table's ANALYZE samples: the sample_blks_total
    its progress row shows is this or the table's size, if smaller (0: its
    statement analyzes nothing)."""
    if opts.statement != ANALYZE and not opts.analyze:
        return 0.0
    return float(max(MIN_SAMPLE_ROWS, SAMPLE_ROWS_PER_TARGET * table_target(row, target)))


def work_parts(row: list[Any], opts: VacOptions, target: int, block: int,
               sizes: dict[str, float]) -> tuple[float, float, float]:
    """(heap, TOAST, sample) bytes of one table's statement."""
    pages = float(row[RELPAGES] or 0)
    if row[KIND] == "p":
        pages = float(row[PART_PAGES] or 0)
    if pages <= 0:
        pages = (sizes.get(f"{row[NSP]}.{row[REL]}") or 0.0) / block
    pages = max(1.0, pages)
    toast = 0.0 if opts.no_process_toast else float(row[TOAST_PAGES] or 0)
    # at least one block: a table whose columns all have target 0 is read
    # for nothing, but its statement still runs
    sample = max(1.0, min(pages, float(SAMPLE_ROWS_PER_TARGET * table_target(row, target))))
    st = opts.statement
    if st == ANALYZE:
        return 0.0, 0.0, sample * block
    heap = pages * block * (2 if st == VACUUM_FULL else 1)  # FULL reads and writes it
    return heap, toast * block, sample * block if opts.analyze else 0.0


def _resolve(spec: str, rows: dict[tuple[str, str], list[Any]],
             search: tuple[str, ...]) -> list[Any] | None:
    parts = name_parts(spec)
    if len(parts) >= 2:
        return rows.get((parts[-2], parts[-1]))
    return next((rows[(s, parts[0])] for s in search if (s, parts[0]) in rows), None)


def chosen(rows: list[list[Any]], opts: VacOptions) -> list[list[Any]]:
    """The tables vacuumdb takes from this database, in its order (the
    rows come ORDER BY relpages DESC): those -t names (any kind; unqualified
    by the default search_path: pg_catalog, the user's schema, public), else
    its tables and materialized views, within -n / outside -N, as old as
    --min-xid-age / --min-mxid-age ask; with --missing-stats-only those
    never analyzed (vacuumdb reads pg_statistic, which the monitor may not:
    the list is an estimate)."""
    if opts.tables:
        by = {(r[NSP], r[REL]): r for r in rows}
        search = ("pg_catalog", *((opts.user,) if opts.user else ()), "public")
        picked = {id(r): r for r in (_resolve(t, by, search) for t in opts.tables) if r}
        out = [r for r in rows if id(r) in picked]
    else:
        keep = {name_parts(s)[-1] for s in opts.schemas}
        drop = {name_parts(s)[-1] for s in opts.exclude_schemas}
        out = [r for r in rows if r[KIND] in DEFAULT_KINDS
               and (not keep or r[NSP] in keep) and r[NSP] not in drop]
    if opts.min_xid_age:
        out = [r for r in out if r[XID_AGE] is not None and r[XID_AGE] >= opts.min_xid_age]
    if opts.min_mxid_age:
        out = [r for r in out if r[MXID_AGE] is not None and r[MXID_AGE] >= opts.min_mxid_age]
    if opts.missing_stats_only:  # never analyzed: pgparmon's reading of "missing statistics"
        out = [r for r in out if r[RELTUPLES] != 0 and r[LAST_ANALYZE] is None
               and (len(r) <= LAST_AUTOANALYZE or r[LAST_AUTOANALYZE] is None)]
    return out


def label(rel: str, db: str, stage: int | None, many_dbs: bool) -> str:
    name = f"{db}: {rel}" if many_dbs else rel
    return f"{name} (stage {stage + 1})" if stage is not None else name


def build(tr: Tracker, st: VacState, dbs: list[dict[str, Any]]) -> None:
    """The rounds and their items, into the tracker and the state. `dbs`:
    each database's name, statistics target, table rows and file sizes, in
    vacuumdb's order (PlanInputs.extra)."""
    opts = st.opts
    names = [d["name"] for d in dbs]
    stages: list[int | None] = list(range(opts.stages)) if opts.in_stages else [None]
    by_db = {d["name"]: d for d in dbs}
    for d in dbs:
        if d.get("error"):
            st.unread.append(f"{d['name']} ({d['error']})")
        for row in d.get("tables") or ():
            st.stats[(d["name"], int(row[OID]))] = (row[LAST_VACUUM], row[LAST_ANALYZE])
    for stage in stages:
        for db in names:
            r = len(st.rounds)
            st.rounds.append(Round(db=db, stage=stage))
            info = by_db[db]
            for row in chosen(info.get("tables") or [], opts):
                _add(tr, st, r, row, info, len(names) > 1)
    for rd in st.rounds:  # vacuumdb's order: relpages when the round began
        rd.keys.sort(key=lambda k: -tr.items[k].size)
    tr.mark_planned()


def _add(tr: Tracker, st: VacState, r: int, row: list[Any], info: dict[str, Any],
         many_dbs: bool) -> None:
    rd, opts, block = st.rounds[r], st.opts, tr.block_size
    target = stage_target(opts, rd.stage, int(info.get("target") or DEFAULT_TARGET))
    heap, toast, sample = work_parts(row, opts, target, block, info.get("sizes") or {})
    rel = f"{row[NSP]}.{row[REL]}"
    later_stage = bool(rd.stage)  # an earlier stage's ANALYZE set relpages to the truth
    size = max(heap, sample) / block if later_stage else float(row[RELPAGES] or 0)
    key = f"{r}:{rd.db}:{rel}"
    reltuples = float(row[RELTUPLES]) if row[RELTUPLES] and row[RELTUPLES] > 0 else None
    tr.add(Item(key=key, kind=opts.statement, relation=rel,
                name=label(rel, rd.db, rd.stage, many_dbs), size=size,
                work=heap + toast + sample, reltuples=reltuples, heap_bytes=heap or None))
    toast_oid = int(row[TOAST_OID]) if row[TOAST_OID] else None
    st.parts[key] = Parts(rd.db, int(row[OID]), toast_oid, heap, toast, sample,
                          sample_cap(row, opts, target))
    st.round_of[key] = r
    st.by_oid[(r, rd.db, int(row[OID]))] = key
    if toast_oid:
        st.by_oid[(r, rd.db, toast_oid)] = key
    st.by_name[(r, rd.db, rel)] = key
    rd.keys.append(key)


def add_unplanned(tr: Tracker, st: VacState, r: int, db: str, rel: str) -> str:
    """A table a session works on that the plan did not list (created
    since, or in a database whose tables could not be read): an item of
    unknown size in that round."""
    rd = st.rounds[r]
    key = f"{r}:{db}:{rel}"
    if key not in tr.items:
        block = float(tr.block_size)
        tr.add(Item(key=key, kind=st.opts.statement, relation=rel,
                    name=label(rel, db, rd.stage, len({x.db for x in st.rounds}) > 1),
                    size=0.0, work=block))
        st.parts[key] = Parts(db, 0, None, block, 0.0, 0.0)
        st.round_of[key] = r
        st.by_name[(r, db, rel)] = key
        rd.keys.append(key)
    return key


def inferred_options(statement: str | None) -> VacOptions:
    """A vacuumdb whose command line cannot be read (a remote client): what
    its statements show (VACUUM, VACUUM (ANALYZE...), ANALYZE), every table."""
    q = (statement or "").lstrip().upper()
    if q.startswith("ANALY"):
        return VacOptions(analyze_only=True)
    head = q.split(")", 1)[0] if q.startswith(("VACUUM (", "VACUUM(")) else ""
    return VacOptions(analyze="ANALY" in head, full="FULL" in head, freeze="FREEZE" in head)


def first_round(st: VacState, db: str, since: float | None, began: float | None) -> int:
    """The round a job is in when its sessions are first seen (`since`:
    the session's start; `began`: its client process's, when seen): that
    database's only round; with stages, the second once every table of
    the first was analyzed since the process began and before the session
    began (the statistics read with the plan, which an ANALYZE updates as
    it ends: a first stage's session began before the last of its tables
    ended), else the first (a guess the second and third look alike; the
    sessions' progress rows may move it on)."""
    mine = [r for r, rd in enumerate(st.rounds) if rd.db == db]
    if not mine:
        return 0
    if len(mine) == 1:
        return mine[0]
    if began is None or since is None:
        st.uncertain = True
        return mine[0]
    keys = [k for k in st.rounds[mine[0]].keys
            if st.parts[k].oid and k.split(":", 2)[2] not in NO_ANALYZE]
    fresh = [st.stats.get((db, st.parts[k].oid), (None, None))[1] for k in keys]
    if not fresh or any(t is None or not began <= t < since for t in fresh):
        return mine[0]
    st.uncertain = True
    return mine[1]
