"""`pgparmon advise --subscription NAME`: the max_sync_workers_per_subscription
for logical replication's initial sync, how long it takes, what limits it,
and the settings it needs on both servers (docs/advise.md, "A
subscription's initial sync").

The sync is a parallel COPY of whole tables, one per sync worker, COPY TO on
the publisher and COPY FROM on the subscriber: the same evidence as a COPY
load (its probe on the subscriber, fed a sample of the largest table read
from the publisher; else the static guess), the same schedule of whole
items as a dump (the largest table bounds the run), each table's work its
publisher heap bytes (pg_class, never a lock-taking function), weighted by
the indexes its COPY FROM maintains on the subscriber. The choice is capped
by what both servers can start (subsettings.py).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import conninfo as pgconninfo

from ..analyze.schedule import WorkItem, simulate
from ..connect import ConnectError, ConnTarget, connect, describe_target
from ..readers.db import ServerFacts, read_facts
from ..redact import redact_text
from .. import sql
from .. import units as fmt
from . import predict, subsettings
from .checks import Caution, server_facts
from .copyadvice import INDEX_COST, CopyTarget, copy_probe, table_info
from .document import Advice, confidence, conn_args, why_lines
from .evidence import calibrated_static, usable_cores
from .inventory import read_advise_facts, server_is_local
from .kinds import SUBSCRIPTION
from .predict import Ceiling, Compression, Evidence, Prediction
from .probe import qualified_name
from .probe.copyfile import CopyInputError, check_copy_file
from .request import AdviseError, Request, catalog_session

# Each table's sync besides its COPY: a sync worker starts, opens a slot on
# the publisher and waits for its consistent point, then hands the table to
# the apply worker (catch-up). Measured on the project's 2-core VM
# (PostgreSQL 15, fsync off, idle servers): 20 tables of 10 rows synced in
# 2.6 s with one sync worker and 0.7 s with two: 0.07 to 0.13 s a table.
TABLE_START_S = 0.1
# The probe's sample of the largest table, at most this many bytes of COPY
# text (it is loaded again when smaller than the probe's steps need).
SAMPLE_BYTES = 64e6
# The publisher's statement_timeout while it reads the sample.
SAMPLE_TIMEOUT_MS = 120_000


@dataclass
class SyncTable:
    """A table to sync: its publisher heap bytes and rows, whether the
    subscriber has it and the indexes its COPY FROM maintains there, its
    state (a running sync: waiting or copying)."""

    name: str
    heap: float
    rows: float
    on_subscriber: bool = True
    indexes: int = 0
    state: str = "i"


@dataclass
class Sides:
    """What the advice read: the subscriber's facts and sync facts, the
    publisher's, the tables to sync."""

    facts: ServerFacts
    afacts: dict[str, Any]
    local: bool
    sub: dict[str, Any]
    pub: dict[str, Any]
    source: ConnTarget
    source_from: str  # --source, or the subscription's own connection string
    publications: list[str]
    existing: dict[str, Any] | None
    tables: list[SyncTable] = field(default_factory=list)
    warnings: list[Caution] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ read


def read_sides(req: Request) -> Sides:
    """Both servers' facts and the tables; AdviseError (one line) for bad
    input: no subscriber, no publisher, a publication the publisher lacks."""
    if req.conn is None:
        raise AdviseError("a subscription's advice needs the subscriber: give -d DB")
    with catalog_session(req.conn) as conn:
        facts = read_facts(conn)
        afacts = read_advise_facts(conn, facts)
        sub = _query(conn, "advise_subscriber", facts.version_num, {"name": req.subscription})
        existing = sub.get("subscription")
        pubs, source, source_from = _publisher_of(req, conn, existing)
    pub = read_publisher(source, pubs, existing)
    missing = sorted(set(pubs) - set(pub.get("publications") or []))
    if missing:
        raise AdviseError(f"the publisher has no publication {', '.join(missing)} "
                          f"({describe_target(source)}): check --publication")
    s = Sides(facts, afacts, server_is_local(facts), sub, pub, source, source_from, pubs,
              existing)
    s.tables = _to_sync(s)
    _read_subscriber_tables(req, s)
    return s


def _query(conn: psycopg.Connection[Any], name: str, version: int, params: dict[str, Any]
           ) -> dict[str, Any]:
    row = conn.execute(sql.load(name, version), params).fetchone()
    return dict(row[0]) if row and row[0] else {}


def _publisher_of(req: Request, conn: psycopg.Connection[Any],
                  existing: dict[str, Any] | None) -> tuple[list[str], ConnTarget, str]:
    """The publications and the publisher: as given, else the running
    subscription's (its connection string where this role may read it)."""
    if existing is not None and req.publications:
        raise AdviseError(f"subscription {req.subscription} exists: leave out --publication "
                          "(its publications are read from it)")
    if existing is None and not req.publications:
        raise AdviseError(f"no subscription {req.subscription} in this database: to advise "
                          "one before CREATE SUBSCRIPTION give --publication NAME and "
                          "--source CONNINFO (the publisher)")
    pubs = list(req.publications) if existing is None \
        else list(existing.get("publications") or [])
    if req.source is not None:
        return pubs, req.source, "--source"
    if existing is None:
        raise AdviseError("give the publisher with --source CONNINFO (the sizes of its "
                          "tables and its settings)")
    try:
        row = conn.execute(sql.load("logical_conninfo", 100000)).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        raise AdviseError("this role may not read the subscription's connection string: "
                          "give the publisher with --source CONNINFO") from None
    conninfo = ((row[0] if row else None) or {}).get(existing["name"])
    if not conninfo:
        raise AdviseError("the subscription has no connection string: give the publisher "
                          "with --source CONNINFO")
    return pubs, ConnTarget(dbname=conninfo), "the subscription's connection string"


def read_publisher(source: ConnTarget, pubs: list[str],
                   existing: dict[str, Any] | None) -> dict[str, Any]:
    """The publisher's settings, what other work holds of its walsenders
    and slots, the published tables' sizes."""
    oid = existing.get("oid") if existing else None
    try:
        with catalog_session(source) as conn:
            facts = read_facts(conn)
            return _query(conn, "advise_publisher", facts.version_num, {
                "pubs": pubs, "slot": existing.get("slot") if existing else None,
                "appname": existing.get("name") if existing else None,
                "sync": f"pg_{oid}_sync_" if oid is not None else None})
    except ConnectError as exc:
        raise ConnectError(f"the publisher (--source): {exc}") from None


def _to_sync(s: Sides) -> list[SyncTable]:
    """The tables left to copy: every published one for a new subscription;
    for a running one those copying (counted whole: how far their COPY got
    is the live monitor's to follow) then those waiting, in its own order."""
    bs = float((s.pub.get("settings") or {}).get("block_size") or 8192)
    sizes = {t["table"]: (float(t.get("pages") or 0) * bs, float(t.get("rows") or 0))
             for t in s.pub.get("tables") or []}
    if s.existing is None:
        return [SyncTable(n, h, r) for n, (h, r) in sizes.items()]
    out = []
    for name, state in s.existing.get("tables") or []:
        if state in ("i", "d"):
            h, r = sizes.get(name, (0.0, 0.0))
            out.append(SyncTable(name, h, r, state=state))
    out.sort(key=lambda t: t.state != "d")  # those copying hold their workers already
    done = len(s.existing.get("tables") or []) - len(out)
    if done:
        s.notes.append(f"{done} table(s) of the subscription are past their copy (catching "
                       "up or ready): not in the predictions")
    return out


def _read_subscriber_tables(req: Request, s: Sides) -> None:
    assert req.conn is not None
    with catalog_session(req.conn) as conn:
        row = conn.execute(sql.load("advise_subscriber_tables", s.facts.version_num),
                           {"tables": [t.name for t in s.tables]}).fetchone()
    have = {r["table"]: r for r in (row[0] if row else None) or []}
    for t in s.tables:
        r = have.get(t.name)
        t.on_subscriber = r is not None
        t.indexes = int(r["indexes"]) if r else 0
    absent = [t.name for t in s.tables if not t.on_subscriber]
    if absent:
        more = f" (and {len(absent) - 3} more)" if len(absent) > 3 else ""
        s.warnings.append(Caution(
            "missing_tables", f"the subscriber has no table {', '.join(absent[:3])}{more}: "
            "their sync fails and retries until they exist; create the schema first "
            "(pg_dump --schema-only on the publisher, restored here)"))


# ------------------------------------------------------------- evidence


def in_heap_bytes(ev: Evidence, heap_per_unit: float) -> Evidence:
    """The same evidence counted in another unit: throughputs, ceilings and
    the curve times heap_per_unit, CPU per GB over it."""
    f = heap_per_unit
    fit = dataclasses.replace(ev.fit, lam=ev.fit.lam * f,
                              x_max=None if ev.fit.x_max is None else ev.fit.x_max * f)
    return dataclasses.replace(
        ev, fit=fit, points=[(k, x * f) for k, x in ev.points],
        cpu_per_gb={k: v / f for k, v in ev.cpu_per_gb.items()},
        ceilings=[Ceiling(c.name, tuple((k, x * f) for k, x in c.points), c.detail)
                  for c in ev.ceilings])


def evidence(req: Request, s: Sides, static: Evidence, cores: int, max_jobs: int
             ) -> tuple[Evidence, dict[str, Any] | None, int]:
    """The probe's evidence in heap bytes when asked for, else the static
    guess; and the index count the evidence was measured with (each
    table's work is weighted against it)."""
    if req.probe or req.probe_seconds is not None:
        got = _probe(req, s, static, cores, max_jobs)
        if got is not None:
            return got
    s.warnings.append(Caution(
        "guess", f"no measurement behind this advice: it is a guess from {cores} cores "
        "and a typical COPY rate; --probe measures the subscriber's COPY FROM"))
    return static, None, 0


def _probe(req: Request, s: Sides, static: Evidence, cores: int, max_jobs: int
           ) -> tuple[Evidence, dict[str, Any] | None, int] | None:
    """A sample of the largest table the subscriber has, read from the
    publisher, loaded by the COPY probe into a scratch clone of the
    subscriber's table (its indexes, none unique)."""
    assert req.conn is not None
    cands = [t for t in s.tables if t.on_subscriber and t.heap > 0 and t.rows > 0]
    if not cands:
        s.warnings.append(Caution("probe_skipped", "no table with rows to sample (run ANALYZE "
                                                   "on the publisher)"))
        return None
    big = max(cands, key=lambda t: t.heap)
    scratch = tempfile.mkdtemp(prefix="pgparmon-sync-sample-")  # 0700: the data stays ours
    try:
        conn = connect(req.conn)
        try:
            table = table_info(conn, big.name, s.facts.version_num)
            cols = [str(r[0]) for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", [big.name])]
        finally:
            conn.close()
        path = os.path.join(scratch, "sample.csv")
        rows = _sample(s.source, big, cols, path)
        cf = check_copy_file(path, "csv", False, table.columns)
        text_per_row = cf.data_bytes / max(rows, 1)
        heap_per_text = (big.heap / big.rows) / max(text_per_row, 1.0)
        t = CopyTarget(s.facts, s.afacts, s.local, table, cf)
        copy_static = in_heap_bytes(static, 1 / heap_per_text)
        ev, probe_json = copy_probe(req, t, copy_static, cores, max_jobs, s.warnings)
    except (psycopg.Error, CopyInputError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        s.warnings.append(Caution("probe_failed", f"the probe did not run: "
                                                  f"{redact_text(first)}"))
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if ev is None:
        return None
    ev = in_heap_bytes(ev, heap_per_text)
    if ev.fit.n_points < 2:
        ev = calibrated_static(ev, static)
        s.notes.append(ev.note)
    s.notes.append(f"probe: {fmt.size(cf.data_bytes)} of {big.name} read from the publisher, "
                   f"loaded into a scratch copy of the subscriber's table "
                   f"({len(table.indexes)} index(es)); {heap_per_text:.2f} heap bytes a byte "
                   "of COPY text")
    return ev, probe_json, len(table.indexes)


def _sample(source: ConnTarget, t: SyncTable, cols: list[str], path: str) -> int:
    """Up to SAMPLE_BYTES of t as CSV, in the subscriber's column order,
    read from the publisher (a SELECT: what the sync's COPY TO reads);
    the rows written."""
    limit = max(1, int(t.rows * min(1.0, SAMPLE_BYTES / max(t.heap, 1.0))))
    schema, _, rel = t.name.partition(".")
    select = (f"COPY (SELECT {', '.join(_ident(c) for c in cols)} FROM "
              f"{qualified_name(schema, rel)} LIMIT {limit}) TO STDOUT WITH (FORMAT csv)")
    conn = connect(dataclasses.replace(source, statement_timeout_ms=SAMPLE_TIMEOUT_MS))
    lines = 0
    try:
        with conn.cursor() as cur:
            with open(path, "wb") as out, cur.copy(select) as copy:
                for chunk in copy:
                    out.write(chunk)
                    lines += bytes(chunk).count(b"\n")
            # the server's count (a quoted newline is not a row), else the lines
            return cur.rowcount if cur.rowcount > 0 else lines
    finally:
        conn.close()


# ------------------------------------------------------------- predict


def work_items(tables: list[SyncTable], ev: Evidence, ref_indexes: int,
               known_order: bool) -> list[WorkItem]:
    """One item per table: its heap bytes weighted by the indexes it
    maintains (INDEX_COST each, against the evidence's own), plus a table's
    start and hand-over (TABLE_START_S at one worker's rate). Ordered as
    the apply worker starts them when that is known (a running
    subscription), else largest first."""
    ref = 1 + INDEX_COST * ref_indexes
    start = TABLE_START_S * ev.rate(1)
    n = len(tables)
    return [WorkItem(t.name, t.heap * (1 + INDEX_COST * t.indexes) / ref + start,
                     float(n - i) if known_order else t.heap, label=t.name)
            for i, t in enumerate(tables)]


def worst_order_s(items: list[WorkItem], ev: Evidence, j: int) -> float:
    """The run when the largest table starts last (the apply worker starts
    tables in catalog order, not by size)."""
    rev = [dataclasses.replace(it, size=-it.size) for it in items]
    return simulate(rev, j, ev.rate).makespan


def biggest_bound(items: list[WorkItem], ev: Evidence) -> tuple[WorkItem, float] | None:
    """The largest table and its time alone on one sync worker: no count
    of sync workers ends the sync sooner."""
    if not items:
        return None
    big = max(items, key=lambda it: it.work)
    return big, big.work / ev.rate(1)


# -------------------------------------------------------------- advise


def advise_subscription(req: Request) -> Advice:
    """Read both servers, weigh the evidence, predict each count of sync
    workers, cap by both servers' settings, choose, word the changes."""
    s = read_sides(req)
    if not s.tables:
        raise AdviseError("nothing to sync: the publications hold no table"
                          if s.existing is None else
                          f"subscription {req.subscription}: every table is past its copy")
    cores = usable_cores()
    max_jobs = max(1, req.max_jobs or max(4, cores))
    static = predict.static_evidence(SUBSCRIPTION.name, cores, Compression("none"), s.local)
    ev, probe_json, ref = evidence(req, s, static, cores, max_jobs)
    items = work_items(s.tables, ev, ref, s.existing is not None)
    top = min(len(items), max_jobs if ev.basis == "static" else
              min(max_jobs, ev.limit_n or max_jobs))
    preds = predict.predict(ev, items, list(range(1, max(1, top) + 1)))
    best = predict.choose(preds, ev.cpu_per_gb, {}, extrapolated_ok=ev.extend).recommended
    lims = subsettings.limits({**s.sub, "version_num": s.facts.version_num}, s.pub)
    choice = predict.choose(preds, ev.cpu_per_gb, subsettings.caps(lims),
                            extrapolated_ok=ev.extend)
    rec = choice.recommended
    rec_pred = next(p for p in preds if p.jobs == rec)
    settings = subsettings.changes(
        lims, rec, best, _int((s.sub.get("settings") or {}).get(
            "max_sync_workers_per_subscription")),
        (s.pub.get("settings") or {}).get("wal_level"))
    ok = subsettings.startable(lims)
    dom = _dominant(items, ev, rec_pred)
    s.warnings += _warnings(s, lims, rec, best, ok, dom)
    worst = worst_order_s(items, ev, rec) if s.existing is None and rec > 1 else None
    conf = confidence(ev)
    if rec_pred.extrapolated and conf == "high":
        conf = "medium"
    a = Advice(kind=SUBSCRIPTION.name, recommended=rec, fastest=choice.fastest,
               predictions=preds, lower_bound_s=rec_pred.lower_bound_s, basis=ev.basis,
               confidence=conf, warnings=s.warnings, command=command(req, s, rec),
               evidence=ev, choice=choice, inventory=None, dominant=dom, probe=probe_json,
               why=sync_why(ev, choice, preds, lims, best, dom, worst), notes=s.notes,
               server=server_facts(s.facts, s.afacts, s.local),
               settings=[c.to_json() for c in settings])
    a.subscription = sync_json(req, s, items, ev, ok, worst, best)
    return a


def _int(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _dominant(items: list[WorkItem], ev: Evidence, pred: Prediction) -> dict[str, Any] | None:
    got = biggest_bound(items, ev)
    if got is None or pred.jobs < 2:
        return None
    big, alone = got
    if alone < predict.DOMINANT_SHARE * pred.wall_s:
        return None
    total = sum(it.work for it in items)
    return {"item": big.label, "bytes": round(big.work), "alone_s": round(alone, 2),
            "share": round(big.work / total, 3) if total else None,
            "message": (f"{big.label} is {100 * big.work / total:.0f}% of the work and takes "
                        f"about {fmt.duration(alone)} on one sync worker whatever the count: "
                        "the sync cannot end sooner; a partitioned table published with "
                        "publish_via_partition_root = false syncs its partitions in "
                        "parallel, or the table may sync in a subscription of its own")}


def _warnings(s: Sides, lims: list[subsettings.Limit], rec: int, best: int, ok: bool,
              dom: dict[str, Any] | None) -> list[Caution]:
    out: list[Caution] = []
    wal = (s.pub.get("settings") or {}).get("wal_level")
    if wal and wal != "logical":
        out.append(Caution("wal_level", f"the publisher runs wal_level = {wal}: logical "
                                        "replication needs logical (a restart)"))
    if not ok:
        _room, tight = subsettings.room(lims)
        assert tight is not None
        out.append(Caution(
            "cannot_start", f"no sync worker can start now: {tight.label()}; raise it to "
            f"{tight.needed(1)} at least (a restart) before the sync"))
    elif rec < best:
        _room, tight = subsettings.room(lims)
        assert tight is not None
        out.append(Caution(
            "settings_cap", f"{best} sync workers would be faster but {tight.label()} leaves "
            f"room for {rec}: raise it to {tight.needed(best)} (a restart) to allow {best}"))
    if s.existing is not None and not s.existing.get("enabled"):
        out.append(Caution("disabled", f"subscription {s.existing['name']} is disabled: "
                                       "ALTER SUBSCRIPTION ... ENABLE starts its sync"))
    if s.facts.version_num < 160000:
        out.append(Caution("copy_version", "before PostgreSQL 16 the subscriber's COPY "
                                           "FROM extends each table one page at a time"))
    if dom:
        out.append(Caution("dominant_table", dom["message"]))
    return out


def sync_why(ev: Evidence, choice: predict.Choice, preds: list[Prediction],
             lims: list[subsettings.Limit], best: int, dom: dict[str, Any] | None,
             worst: float | None) -> list[str]:
    """The reasoning lines in sync workers."""
    base = why_lines(ev, choice, preds, None)
    out = [w.replace("-j ", "max_sync_workers_per_subscription = ") for w in base
           if not w.startswith("capped by")]
    if choice.recommended < best:
        _room, tight = subsettings.room(lims)
        if tight is not None:
            out.append(f"capped by {tight.label()}: room for {max(0, tight.room)} sync "
                       f"worker(s); {best} need it at {tight.needed(best)}")
    elif "tables" not in " ".join(choice.capped_by):
        out += [f"capped by {w}" for w in choice.capped_by]
    out.append(f"limited by: {ev.limit}")
    if ev.per_stream_limit:
        out.append(f"one sync worker is bound by {ev.per_stream_limit}")
    if dom:
        out.append(f"one table sets the wall time: {dom['item']} (about "
                   f"{fmt.duration(dom['alone_s'])} alone)")
    if worst is not None:
        out.append("the apply worker starts the tables in catalog order, not largest first: "
                   f"up to {fmt.duration(worst)} when the largest starts last")
    if ev.basis == "static":
        out.append(ev.note)
    return out


def sync_json(req: Request, s: Sides, items: list[WorkItem], ev: Evidence, ok: bool,
              worst: float | None, best: int) -> dict[str, Any]:
    """The advice's `subscription` object: the sync's tables and sides."""
    got = biggest_bound(items, ev)
    big = max(s.tables, key=lambda t: t.heap)
    return {
        "name": req.subscription, "exists": s.existing is not None,
        "publications": s.publications,
        "publisher": redact_text(describe_target(s.source)), "publisher_from": s.source_from,
        "tables": len(s.tables), "bytes": round(sum(t.heap for t in s.tables)),
        "largest_table": big.name, "largest_bytes": round(big.heap),
        "largest_alone_s": round(got[1], 2) if got else None,
        "tables_with_indexes": sum(1 for t in s.tables if t.indexes),
        "tables_missing": sorted(t.name for t in s.tables if not t.on_subscriber),
        "worst_order_s": None if worst is None else round(worst, 2),
        "best_jobs": best, "startable": ok,
        "index_maintenance": "measured" if ev.basis == "probe" else "weighted, not measured",
    }


def command(req: Request, s: Sides, j: int) -> str:
    """On the subscriber: the setting and a reload; for a subscription to
    create, its CREATE SUBSCRIPTION (the publisher's password redacted)."""
    db = req.dbname_for_command or "DBNAME"
    psql = ["psql", "-X", *conn_args(req), "-d", db]
    steps = [[*psql, "-c", f"ALTER SYSTEM SET max_sync_workers_per_subscription = {j}",
              "-c", "SELECT pg_reload_conf()"]]
    if s.existing is None:
        name = _ident(req.subscription or "sub")
        pubs = ", ".join(_ident(p) for p in s.publications)
        conninfo = _conninfo_of(s.source).replace("'", "''")
        steps.append([*psql, "-c", f"CREATE SUBSCRIPTION {name} CONNECTION '{conninfo}' "
                                   f"PUBLICATION {pubs} WITH (copy_data = true)"])
    return redact_text(" && ".join(shlex.join(a) for a in steps))


def _ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _conninfo_of(t: ConnTarget) -> str:
    """The publisher as a conninfo string for CREATE SUBSCRIPTION."""
    base = t.dbname or ""
    if "=" in base or base.startswith(("postgresql://", "postgres://")):
        params = {k: str(v) for k, v in pgconninfo.conninfo_to_dict(base).items()
                  if v is not None}
    else:
        params = {"dbname": base} if base else {}
    for k, v in (("host", t.host), ("port", t.port), ("user", t.user)):
        if v and k not in params:
            params[k] = str(v)
    return pgconninfo.make_conninfo("", **params)
