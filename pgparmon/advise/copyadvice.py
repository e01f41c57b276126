"""`pgparmon advise --copy FILE --table T`: how many parallel COPY streams
to load FILE into T with (docs/advise.md, "COPY loads").

The same evidence, fit and choice as a dump or restore: a probe
(`probe.copyload`) or the static guess; the work is the file's bytes, split
evenly between the streams, so the predicted time at j streams is
bytes / X(j).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

import psycopg

from ..readers.db import ServerFacts, read_facts
from ..redact import redact_text
from .. import units as fmt
from . import predict, usl
from .document import Advice, confidence, conn_args, why_lines
from .checks import Caution, connection_cap, connection_warnings, server_facts
from ..analyze.progress import DEFAULT_TEXT_RATIO
from .evidence import (
    bounded,
    busy_host,
    calibrated_static,
    plan_seconds,
    probe_budget,
    probe_streams,
    stream_plan_of,
    usable_cores,
)
from .inventory import read_advise_facts, server_is_local, setting_bytes
from .kinds import COPY
from .predict import Evidence, Prediction
from .probe import ProbeError, qualified_name
from .probe.walstep import WAL_PER_HEAP
from .probe.copyfile import CopyFile, CopyInputError, check_copy_file
from .probe.copyload import (
    TargetTable,
    as_logged,
    grown_step_s,
    logged_cost,
    logged_step_s,
    run_copy_probe,
)
from .probe.indexgrowth import as_grown, load_scale, model_of
from .probe.loggedtop import as_logged_load, logged_top_need
from .probe.results import ProbeResult
from .request import AdviseError, Request, catalog_session

# Seed: parallel COPY into one table scales best to about half the server's
# CPUs and worse beyond.
COPY_CORE_SHARE = 0.5
# One COPY FROM stream of a csv/text file, file bytes per second, no index
# (measured 40 MB/s on the project's 2-core VM; bench/advise_copy_accuracy.py).
COPY_FILE_RATE = 40e6
# Before PostgreSQL 16 concurrent COPY into one table waits on the relation
# extension lock (16 extends a table by many pages at once).
BULK_EXTEND_VERSION = 160000
# The guess's cost of each index on the table, in multiples of a stream's
# parsing (a btree on random text cost about 1.5x on the project's VM).
INDEX_COST = 1.5


def table_info(conn: psycopg.Connection[Any], name: str, version_num: int) -> TargetTable:
    """The TargetTable named `name` (as SQL would resolve it: search_path,
    quoting), or AdviseError (exit 2) when there is none."""
    try:
        row = conn.execute(
            "SELECT c.oid, n.nspname, c.relname, c.relkind, c.relpersistence, c.reltuples "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass(%s)", [name]).fetchone()
    except psycopg.Error:
        row = None
    if row is None:
        raise AdviseError(f"--table {name}: no such table in this database (check the name, "
                          "its schema and search_path)")
    oid, schema, relname, relkind, persistence, reltuples = row
    if relkind not in ("r", "p"):
        raise AdviseError(f"--table {name}: not a table (relkind {relkind}): COPY loads tables")
    gen = " AND attgenerated = ''" if version_num >= 120000 else ""
    ncols = conn.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                         f"AND NOT attisdropped{gen}", [oid]).fetchone()
    idx = conn.execute("SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s "
                       "ORDER BY indexrelid", [oid]).fetchall()
    rows = float(reltuples) if reltuples is not None and float(reltuples) >= 0 else None
    return TargetTable(str(schema), str(relname), int(ncols[0] if ncols else 0),
                       [str(r[0]) for r in idx], persistence == "p", rows)


def copy_static(cores: int, local: bool, indexes: int = 0) -> Evidence:
    """The guess: one stream at COPY_FILE_RATE / (1 + INDEX_COST per index),
    a ceiling at half the cores."""
    r1 = COPY_FILE_RATE / (1 + INDEX_COST * indexes)
    half = max(1, int(cores * COPY_CORE_SHARE))
    where = "this host's" if local else "this host's (the server's are not known)"
    f = usl.Fit("plateau", r1, x_max=r1 * half, max_n=float(max(1, cores * 2)), n_points=0,
                note=f"static guess: parallel COPY scales to about half the cores ({half} of "
                     f"{where} {cores})")
    pts = [(float(k), f.throughput(k)) for k in range(1, max(1, cores * 2) + 1)]
    return Evidence("static", f, pts,
                    limit=f"CPU: the server's backends busy (past half of {cores} cores)",
                    per_stream_limit="the server's COPY FROM parsing (CPU)",
                    note="no measurement: one COPY stream at a typical "
                         f"{fmt.rate(r1)} per backend"
                         + (f" with {indexes} index(es)" if indexes else "")
                         + ", parallel COPY best near half the "
                         f"cores (min({cores}/2, ...)); COPY's CPU per byte differs by server "
                         "version; --probe-seconds N measures this system")


def copy_limits(res: Any, cores: int, indexes: int) -> tuple[str, str | None]:
    """What saturates and what bounds one stream, from the probe's steps
    (the thresholds of evidence.probe_limits)."""
    pts = sorted(res.points, key=lambda p: p.streams)
    first, last = pts[0], pts[-1]
    el1 = max(first.elapsed_s, 1e-9)
    c1 = first.client_cpu_s / el1
    s1 = (first.server_cpu_s or 0.0) / el1
    per_stream = None
    if s1 >= 0.75 and s1 >= c1:
        per_stream = "the server's COPY FROM (one backend's CPU)"
    elif c1 >= 0.75:
        per_stream = "the client (psql reading the file)"
    el = max(last.elapsed_s, 1e-9)
    cpu_last = (last.client_cpu_s + (last.server_cpu_s or 0.0)) / el
    ix = f", with {indexes} index(es) to maintain" if indexes else ""
    if (last.disk_util is not None and last.disk_util >= 90.0
            and first.disk_await_ms is not None and last.disk_await_ms is not None
            and last.disk_await_ms >= 2 * max(first.disk_await_ms, 0.1)):
        return "disk (the file's device)", per_stream
    if cpu_last >= 0.85 * cores:
        return f"CPU: the server's backends busy ({cores} cores{ix})", per_stream
    busy = busy_host(last, cpu_last, cores)
    if busy:
        return busy, per_stream
    if indexes:
        return ("contention in the server: index maintenance (shared index pages) or "
                "relation extension"), per_stream
    return "contention in the server (relation extension, buffers) or the disk", per_stream


def copy_predictions(ev: Evidence, data_bytes: float, jobs: list[int]) -> list[Prediction]:
    out = []
    for j in jobs:
        wall = data_bytes / max(ev.throughput(j), 1e-9)
        extrap = ev.basis != "static" and j > ev.fit.max_n + 1e-9
        out.append(Prediction(j, wall, predict.curve_bottleneck(ev, j), wall, 0.0, None, None,
                              extrap))
    return out


@dataclass
class CopyTarget:
    """What a COPY load's advice reads: the server's facts, the table and
    the file checked against it."""

    facts: ServerFacts
    afacts: dict[str, Any]
    local: bool
    table: TargetTable
    cf: CopyFile

    @property
    def settings(self) -> dict[str, Any]:
        return self.afacts.get("settings") or {}


def advise_copy(req: Request) -> Advice:
    """How many COPY streams: read the table and the file, probe or guess,
    predict each stream count, cap by the connections, choose."""
    t = read_target(req)
    warnings: list[Caution] = []
    notes: list[str] = []
    cores = usable_cores()
    max_jobs = max(1, req.max_jobs or cores)
    static = copy_static(cores, t.local, len(t.table.indexes))
    data = float(t.cf.data_bytes)
    ev, probe_json = _copy_evidence(req, t, static, cores, max_jobs, warnings, notes)

    limit = max_jobs if ev.basis == "static" else min(max_jobs, ev.limit_n or max_jobs)
    jobs = list(range(1, max(1, limit) + 1))
    preds = copy_predictions(ev, data, jobs)
    caps = dict(connection_cap(COPY.name, t.afacts))
    choice = predict.choose(preds, ev.cpu_per_gb, caps, extrapolated_ok=ev.extend)
    rec = choice.recommended
    warnings += connection_warnings(COPY.name, t.afacts, choice)
    warnings += copy_warnings(t.table, t.settings, data, t.facts.version_num,
                              ProbeResult.from_json(probe_json) if probe_json else None)
    if t.cf.multiline:
        notes.append("some records hold newlines (quoted): the command's line-based split "
                     "would cut them; use a loader that splits the file on records")
    a = Advice(kind=COPY.name, recommended=rec, fastest=choice.fastest, predictions=preds,
               lower_bound_s=next(p.lower_bound_s for p in preds if p.jobs == rec),
               basis=ev.basis, confidence=confidence(ev), warnings=warnings,
               command=copy_command(req, t.cf, t.table, rec), evidence=ev, choice=choice,
               inventory=None, dominant=None, probe=probe_json,
               why=copy_why(ev, choice, preds), notes=notes,
               server=server_facts(t.facts, t.afacts, t.local))
    a.copy = copy_json(t, ev, probe_json)
    return a


def read_target(req: Request) -> CopyTarget:
    """The file's shape, the server's facts and the table; the file again,
    against the table's columns. AdviseError (one line) for bad input."""
    assert req.copy_file is not None and req.copy_table is not None
    path = req.copy_file
    try:
        check_copy_file(path, req.copy_format, req.copy_header, None)
    except CopyInputError as exc:
        raise AdviseError(str(exc)) from None
    if req.conn is None:
        raise AdviseError("--copy needs the server: give -d DB (and -h/-p/-U as for psql)")
    with catalog_session(req.conn) as conn:
        facts = read_facts(conn)
        afacts = read_advise_facts(conn, facts)
        local = server_is_local(facts)
        table = table_info(conn, req.copy_table, facts.version_num)
    try:
        cf = check_copy_file(path, req.copy_format, req.copy_header, table.columns)
    except CopyInputError as exc:
        raise AdviseError(str(exc)) from None
    return CopyTarget(facts, afacts, local, table, cf)


def _copy_evidence(req: Request, t: CopyTarget, static: Evidence, cores: int, max_jobs: int,
                   warnings: list[Caution], notes: list[str]
                   ) -> tuple[Evidence, dict[str, Any] | None]:
    """The probe's evidence when asked for and affordable, else the static
    guess (and a warning that it is one); and the probe's JSON."""
    ev: Evidence | None = None
    probe_json: dict[str, Any] | None = None
    if req.probe or req.probe_seconds is not None:
        ev, probe_json = copy_probe(req, t, static, cores, max_jobs, warnings)
        if ev is not None and ev.fit.n_points < 2:
            ev = calibrated_static(ev, static)
            notes.append(ev.note)
    if ev is None:
        ev = static
        warnings.append(Caution("guess", "no measurement behind this advice: it is a guess "
                                         f"from {cores} cores and a typical COPY rate; "
                                         "--probe-seconds N measures this system"))
    return ev, probe_json


def copy_probe(req: Request, t: CopyTarget, static: Evidence, cores: int, max_jobs: int,
               warnings: list[Caution]) -> tuple[Evidence | None, dict[str, Any] | None]:
    """The COPY probe within its budget, fitted and bounded; (None, ...) with
    a warning when it was skipped, failed or measured nothing."""
    assert req.conn is not None
    streams = probe_streams(max_jobs)
    guess = float(t.cf.data_bytes) / static.throughput(1)
    wal_counts = len(stream_plan_of(streams)) if t.table.logged else 0
    need = (plan_seconds(streams, wal_counts)
            + (logged_step_s() + logged_top_need(streams) if t.table.logged else 0.0)
            + (grown_step_s() if t.table.indexes else 0.0))
    budget, skip = probe_budget(req, guess, need)
    if skip is not None:
        warnings.append(Caution("probe_skipped", skip))
        return None, None
    try:
        res = run_copy_probe(req.conn, t.cf, t.table, budget_s=budget, max_streams=streams,
                             max_wal_size=setting_bytes(t.settings, "max_wal_size"))
    except CopyInputError as exc:
        raise AdviseError(str(exc)) from None
    except ProbeError as exc:
        warnings.append(Caution("probe_failed", f"the probe did not run: {exc}"))
        return None, None
    probe_json = res.to_json()
    ev = copy_probe_evidence(res, cores, len(t.table.indexes), load_bytes=t.cf.data_bytes,
                             existing_bytes=existing_bytes(t.table, t.cf))
    if ev is None:
        warnings.append(Caution("probe_failed", "the probe measured nothing within its budget"))
    return ev, probe_json


def existing_bytes(table: TargetTable, cf: CopyFile) -> float:
    """The table's rows now (pg_class.reltuples: an estimate; none when
    never counted) in bytes of this file's records: what its indexes hold
    before the load, for `indexgrowth`."""
    if not table.rows or table.rows <= 0:
        return 0.0
    return table.rows * cf.record_bytes


def copy_probe_evidence(res: ProbeResult, cores: int, indexes: int, *,
                        load_bytes: float = 0.0, existing_bytes: float = 0.0
                        ) -> Evidence | None:
    """The probe's steps as the load into the table runs them (`as_logged`:
    each stream's own cost of writing WAL, from the logged step;
    `loggedtop.as_logged_load`: what the streams pay for sharing the WAL,
    from the step of the most streams into the logged table; `as_grown`:
    the indexes' growth over load_bytes of file, from the grown step, into a
    table that holds existing_bytes' worth already), fitted and bounded by
    the host's CPU and the WAL step's ceiling over the WAL a file byte makes
    (`wal_per_file_byte`); None when nothing was measured."""
    shared, logged_limit = as_logged_load(as_logged(res))
    lres = as_grown(shared, model_of(res), load_bytes, existing_bytes)
    pts = lres.fit_points()
    if not pts:
        return None
    cpu = {int(p.streams): v for p in lres.points
           if (v := lres.cpu_s_per_gb(p.streams)) is not None}
    neck, per_stream = copy_limits(lres, cores, indexes)
    neck = logged_limit or neck
    ev = predict.points_evidence("probe", pts, limit=neck, per_stream_limit=per_stream,
                                 cpu_per_gb=cpu, detail={"probe": res.to_json()})
    return bounded(ev, lres, cores, wal_per_file_byte(res))


def wal_per_file_byte(res: ProbeResult) -> float:
    """WAL bytes a byte of the file makes: what the logged step measured,
    else the WAL a heap byte makes over the heap bytes a byte of COPY text
    makes (a typical ratio: narrow rows with an index make more)."""
    if res.logged is not None and (w := res.logged.wal_per_byte) is not None and w > 0:
        return w
    return WAL_PER_HEAP / DEFAULT_TEXT_RATIO


def copy_why(ev: Evidence, choice: predict.Choice, preds: list[Prediction]) -> list[str]:
    """The reasoning lines in streams, what limits them all and one."""
    why = [re.sub(r"-j (\d+)", r"\1 stream(s)", w) for w in why_lines(ev, choice, preds, None)]
    why.append(f"limited by: {ev.limit}")
    if ev.per_stream_limit:
        why.append(f"one stream is bound by {ev.per_stream_limit}")
    if ev.basis == "static":
        why.append(ev.note)
    return why


def copy_json(t: CopyTarget, ev: Evidence, probe_json: dict[str, Any] | None
              ) -> dict[str, Any]:
    """The advice's `copy` object: the file, the table, what was measured."""
    cf, table = t.cf, t.table
    return {
        "file": cf.path, "format": cf.fmt, "header": cf.header, "bytes": cf.size,
        "data_bytes": cf.data_bytes, "columns": cf.columns, "multiline_records": cf.multiline,
        "table": table.name,
        "table_rows": table.rows, "logged": table.logged, "indexes": len(table.indexes),
        "index_maintenance": (("measured" if ev.basis == "probe" else "not measured")
                              if table.indexes else "none"),
        "wal": wal_json(table, probe_json),
        "index_growth": growth_json(t, probe_json),
    }


def growth_json(t: CopyTarget, probe_json: dict[str, Any] | None) -> str:
    """The advice's copy.index_growth: what the indexes' growth over the
    load costs it, as the probe's grown step measured it."""
    if not t.table.indexes:
        return "none"
    res = ProbeResult.from_json(probe_json) if probe_json else None
    s = (load_scale(res, t.cf.data_bytes, existing_bytes(t.table, t.cf))
         if res is not None else None)
    if s is None:
        return "not measured"
    return (f"measured: the load runs at {s:.0%} of the one-stream step's rate as its "
            "indexes grow (a step into a grown index)")


def wal_json(table: TargetTable, probe_json: dict[str, Any] | None) -> str:
    """The advice's copy.wal: what of the load's WAL the probe measured."""
    if not table.logged:
        return "none"
    what = []
    if probe_json and probe_json.get("logged"):
        what.append("each stream's cost (a step into a logged table)")
    if probe_json and probe_json.get("wal"):
        what.append("the ceiling (the WAL step)")
    return ("measured: " + " and ".join(what)) if what else \
        "not measured (the probe's table is unlogged)"


def copy_warnings(table: TargetTable, settings: dict[str, Any], data: float,
                  version_num: int | None, res: ProbeResult | None = None) -> list[Caution]:
    """The load's cautions: its WAL (what the probe measured of it, and
    checkpoints when it writes more than max_wal_size), and the server
    version's extension lock."""
    out: list[Caution] = []
    lg = res.logged if res is not None else None
    r = logged_cost(res) if res is not None else None
    if table.logged and lg is not None and r is not None:
        w = wal_per_file_byte(res) if res is not None else 0.0
        ceiling = "; the WAL's ceiling bounds them" if res is not None and res.wal else ""
        out.append(Caution("wal", f"{table.name} is a logged table: the load writes WAL for "
                                  f"every row and index entry (about {w:.2f} B a byte of "
                                  f"file, measured); one stream into a logged scratch table "
                                  f"ran at {r:.0%} of the unlogged one's rate, and the "
                                  f"predictions carry that cost{ceiling}; full-page images "
                                  "of the table's existing pages after a checkpoint are not "
                                  "in them"))
    elif table.logged and res is not None and res.wal:
        out.append(Caution("wal", f"{table.name} is a logged table: the load writes WAL for "
                                  "every row and index entry, which the probe's unlogged "
                                  "scratch table did not; the WAL's ceiling was measured apart "
                                  "and bounds the predictions, but each stream's own cost of "
                                  "writing it is not in them"))
    elif table.logged:
        out.append(Caution("wal", f"{table.name} is a logged table: the load writes WAL for "
                                  "every row and index entry, which the probe's unlogged "
                                  "scratch table did not; where WAL writes are slow the load "
                                  "is slower than predicted"))
    wal = setting_bytes(settings, "max_wal_size")
    if table.logged and wal:
        per = wal_per_file_byte(res) if res is not None else WAL_PER_HEAP / DEFAULT_TEXT_RATIO
        if data * per > wal:
            out.append(Caution("max_wal_size", f"the load writes about {fmt.size(data * per)} "
                                               f"of WAL ({fmt.size(data)} of file), more than "
                                               f"max_wal_size ({fmt.size(wal)}): checkpoints "
                                               "during the load, and full-page images of the "
                                               "pages it touches again after each"))
    if version_num is not None and version_num < BULK_EXTEND_VERSION:
        out.append(Caution("copy_version", "before PostgreSQL 16, parallel COPY into one table "
                                           "waits on the relation extension lock: more "
                                           "streams gain less"))
    return out


def copy_command(req: Request, cf: CopyFile, table: TargetTable, j: int) -> str:
    """A way to run it: GNU split hands the lines round-robin to j psql
    sessions (records that hold newlines need a loader that splits on
    records)."""
    db = req.dbname_for_command or "DBNAME"
    opts = "FORMAT csv" if cf.fmt == "csv" else "FORMAT text"
    psql = shlex.join(["psql", "-X", "-v", "ON_ERROR_STOP=1", *conn_args(req), "-d", db, "-c",
                       f"\\copy {qualified_name(table.schema, table.relname)} FROM STDIN "
                       f"WITH ({opts})"])
    src = shlex.quote(os.path.abspath(cf.path))
    feed = f"tail -n +2 {src} | " if cf.header else ""
    target = "-" if cf.header else src
    return redact_text(f"{feed}split -n r/{j} --filter={shlex.quote(psql)} {target}")
