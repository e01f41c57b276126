"""Every version band of every query pgparmon sends, run against the test
cluster (PostgreSQL 15), so that a syntax error, a misspelt column or a
result of the wrong shape fails here and not on a user's server.

The queries live in pgparmon/sql/NAME_VVVVVV.sql (VVVVVV: the lowest
server_version_num a band is for); the test finds them all, so a new band is
tested without editing this file. The bands for servers older than 15
(sample_100000 for 10-11, sample_120000 for 12, sample_130000 for 13, and the
10+ bands of the other queries) use only columns and views that 15 still
has: where an older server lacks a view or a column the band selects NULL
instead, so on 15 they run as written. What 15 cannot tell is whether an
older server has everything a band names: see docs/versions.md.

The per-tick sample query is run while the server has something to show in
every part of it: a pg_dump-named session idle in a transaction, a
pg_restore-named session waiting on a lock (blocked_by, waiting_for), a COPY
FROM STDIN in progress (pg_stat_progress_copy) and a CREATE INDEX
CONCURRENTLY waiting for writers (pg_stat_progress_create_index).

The SQL of `advise --probe` (COPY of ctid ranges, index builds on a temp
table) is sent through psql and run by tests/test_probe.py.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from importlib import resources
from typing import Any

import psycopg
import pytest

from pgparmon import sql
from pgparmon.cluster import Cluster
from pgparmon.connect import ConnTarget, connect
from pgparmon.jobs.registry import sample_apps
from pgparmon.readers.db import NO_APPS, DbSampler, read_facts
from pgparmon.snapshot import DbSample

DB = "bands"
APPS = sample_apps()  # the drivers' application_name regexes, bound as the sampler binds them
# what the product sends, and the parameters it binds
NAMES = ("facts", "sample", "tables", "done", "locks", "advise", "postdata",
         "logical_sync", "logical_slots", "logical_conninfo", "logical_publisher",
         "advise_subscriber", "advise_subscriber_tables", "advise_publisher",
         "vacuumdb_tables", "vacuumdb_databases", "vacuumdb_done", "large_objects")


def _all_bands() -> list[tuple[str, int]]:
    out = []
    for entry in resources.files(sql.__package__).iterdir():
        if entry.name.endswith(".sql"):
            name, _, v = entry.name[:-4].rpartition("_")
            out.append((name, int(v)))
    return sorted(out)


BANDS = _all_bands()
# the sample bands this server (15) runs; a band for a newer server names its
# views (17+: pg_stat_checkpointer): tests/test_versions.py runs it there
SAMPLE_BANDS = [v for n, v in BANDS if n == "sample" and v <= 150000]


def _text(name: str, band: int) -> str:
    return (resources.files(sql.__package__) / f"{name}_{band}.sql").read_text(encoding="utf-8")


def test_every_band_belongs_to_a_query_the_product_sends() -> None:
    assert {n for n, _ in BANDS} == set(NAMES)
    assert ("sample", 100000) in BANDS and ("sample", 140000) in BANDS


@pytest.mark.parametrize("version, expected", [
    (100000, 100000), (110022, 100000), (120000, 120000), (130015, 130000),
    (140000, 140000), (150018, 140000), (170000, 170000), (180000, 170000)])
def test_band_choice(version: int, expected: int) -> None:
    assert sql.band("sample", version) == expected
    for name in NAMES:
        assert sql.band(name, version) <= version


# What a band for an older server must not name (15 has them all, so running
# the band on 15 cannot catch it): the object, and the version it arrived in.
NEWER = [(r"\bleader_pid\b", 130000), (r"\bpg_stat_progress_copy\b", 140000),
         (r"\bpg_stat_progress_create_index\b", 120000), (r"\bquery_id\b", 140000),
         (r"\bpg_stat_progress_analyze\b", 130000),
         (r"\bpg_stat_io\b", 160000), (r"\bpg_stat_checkpointer\b", 170000),
         (r"\bpg_stat_subscription_stats\b", 150000)]


@pytest.mark.parametrize("name, band", BANDS)
def test_older_bands_name_nothing_newer(name: str, band: int) -> None:
    code = re.sub(r"--[^\n]*", "", _text(name, band))  # comments may say what is missing
    code = re.sub(r"'(?:[^']|'')*'", "''", code)  # facts asks to_regclass('...') by name
    for pattern, since in NEWER:
        if band < since:
            assert not re.search(pattern, code), f"{name}_{band} uses {pattern} ({since}+)"


@pytest.fixture(scope="module")
def target(cluster: Cluster) -> ConnTarget:
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}")
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql("CREATE TABLE t (a int PRIMARY KEY, b text); "
                 "INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 2000) g; "
                 "CREATE TABLE locked (a int); CREATE TABLE loading (a int, b text); "
                 "ALTER TABLE loading ADD CONSTRAINT loading_fk FOREIGN KEY (a) "
                 "REFERENCES t (a); ANALYZE", dbname=DB)
    return ConnTarget(dbname=DB, host=str(cluster.sockdir), port=cluster.port,
                      user=cluster.superuser)


@pytest.fixture(scope="module")
def mon(target: ConnTarget) -> Iterator[psycopg.Connection[Any]]:
    """A monitor connection as the product opens it (read-only, timeouts)."""
    conn = connect(target)
    try:
        yield conn
    finally:
        conn.close()


def _conn(cluster: Cluster, app: str) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.conninfo(DB), application_name=app, autocommit=True)


def _wait_for(mon: psycopg.Connection[Any], query: str, what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if mon.execute(query).fetchone()[0]:  # type: ignore[index]
            return
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


@pytest.fixture(scope="module")
def busy(cluster: Cluster, mon: psycopg.Connection[Any]) -> Iterator[dict[str, int]]:
    """Sessions that give every part of the sample query something to show;
    their pids by role."""
    holder = _conn(cluster, "pg_dump")  # a dump leader: idle in transaction, holds locks
    holder.execute("BEGIN")
    holder.execute("LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
    holder.execute("INSERT INTO t VALUES (-1, 'open writer')")  # CIC waits for this one
    waiter = _conn(cluster, "pg_restore")
    copier = _conn(cluster, "pg_restore")
    indexer = _conn(cluster, "pg_restore")
    pids = {"holder": holder.info.backend_pid, "waiter": waiter.info.backend_pid,
            "copier": copier.info.backend_pid, "indexer": indexer.info.backend_pid}
    errors: list[BaseException] = []
    copy_open = threading.Event()
    release = threading.Event()

    def bg(fn: Any) -> threading.Thread:
        def run() -> None:
            try:
                fn()
            except psycopg.Error:
                pass  # cancelled or ended at teardown
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
        th = threading.Thread(target=run, daemon=True)
        th.start()
        return th

    def copy() -> None:
        with copier.cursor() as cur, cur.copy("COPY loading (a, b) FROM STDIN") as cp:
            cp.write_row((1, "x"))
            copy_open.set()
            release.wait(60)

    threads = [bg(lambda: waiter.execute("SELECT count(*) FROM locked")),
               bg(lambda: indexer.execute("CREATE INDEX CONCURRENTLY t_b_idx ON t (b)")),
               bg(copy)]
    try:
        assert copy_open.wait(20)
        _wait_for(mon, f"SELECT wait_event_type = 'Lock' FROM pg_stat_activity "
                       f"WHERE pid = {pids['waiter']}", "the waiter blocked")
        _wait_for(mon, "SELECT count(*) > 0 FROM pg_stat_progress_create_index",
                  "CREATE INDEX CONCURRENTLY in the progress view")
        _wait_for(mon, "SELECT count(*) > 0 FROM pg_stat_progress_copy",
                  "COPY in the progress view")
        yield pids
    finally:
        release.set()
        for c in (waiter, indexer):
            c.cancel_safe() if hasattr(c, "cancel_safe") else c.cancel()
        holder.execute("ROLLBACK")
        for th in threads:
            th.join(20)
        for c in (holder, waiter, copier, indexer):
            c.close()
    assert not errors, errors


@pytest.mark.integration
@pytest.mark.parametrize("band", [v for n, v in BANDS if n == "facts"])
def test_facts(band: int, mon: psycopg.Connection[Any]) -> None:
    (d,) = mon.execute(_text("facts", band)).fetchone()  # type: ignore[misc]
    assert d["version_num"] >= 150000 and d["database"] == DB
    assert d["backend_pid"] == mon.info.backend_pid
    assert d["views"] == {"copy": True, "create_index": True}
    assert {"port", "data_directory", "block_size"} <= set(d["settings"])
    facts = read_facts(mon)  # the product's own reading of it
    assert facts.has_copy_progress and facts.block_size == 8192


@pytest.mark.integration
@pytest.mark.parametrize("band", SAMPLE_BANDS)
@pytest.mark.parametrize("db", [DB, None])
def test_sample(band: int, db: str | None, mon: psycopg.Connection[Any],
                busy: dict[str, int]) -> None:
    (doc,) = mon.execute(_text("sample", band),  # type: ignore[misc]
                         {"db": db, "pids": [], "backup": True,
                          "types": [], **APPS}).fetchone()
    s = DbSample.from_json(doc, 1.0)  # what DbSampler does with the row
    assert s.server_ts is not None
    by_pid = {b.pid: b for b in s.backends}
    assert mon.info.backend_pid not in by_pid
    assert {busy["holder"], busy["waiter"], busy["copier"], busy["indexer"]} <= set(by_pid)
    holder, waiter = by_pid[busy["holder"]], by_pid[busy["waiter"]]
    assert holder.state == "idle in transaction" and holder.application_name == "pg_dump"
    assert holder.query == "INSERT INTO t VALUES (-1, 'open writer')"  # pg_dump: full text
    # the text is kept for the name the drivers declare, not for any session:
    # without the regexes (no driver names one) only the command word is
    (bare,) = mon.execute(_text("sample", band),  # type: ignore[misc]
                          {"db": db, "pids": [], "backup": True, "types": [],
                           **NO_APPS}).fetchone()
    bare_holder = {b.pid: b for b in DbSample.from_json(bare, 1.0).backends}.get(busy["holder"])
    assert bare_holder is not None and bare_holder.query == "INSERT"
    assert waiter.wait_event_type == "Lock" and waiter.blocked_by == (busy["holder"],)
    assert waiter.waiting_for == ("relation", "AccessShareLock", "public.locked")
    assert all(b.leader_pid is None for b in s.backends)
    if band >= 140000:
        assert s.copies is not None
        (cp,) = [c for c in s.copies if c.pid == busy["copier"]]
        assert cp.relation == "public.loading" and cp.command == "COPY FROM"
        assert cp.type == "PIPE"
    else:
        assert s.copies is None  # the view arrived in 14
    if band >= 120000:
        assert s.indexes is not None
        (ix,) = [i for i in s.indexes if i.pid == busy["indexer"]]
        assert ix.relation == "public.t" and ix.command == "CREATE INDEX CONCURRENTLY"
        assert ix.phase and "waiting" in ix.phase
    else:
        assert s.indexes is None  # the view arrived in 12
    assert s.checkpoints is not None and min(s.checkpoints) >= 0


@pytest.mark.integration
def test_sample_filters_other_databases(mon: psycopg.Connection[Any],
                                        busy: dict[str, int]) -> None:
    for band in SAMPLE_BANDS:
        row = mon.execute(_text("sample", band),
                          {"db": "no such db", "pids": [], "backup": True,
                           "types": [], **APPS}).fetchone()
        assert row is not None and row[0]["activity"] == []


@pytest.mark.integration
@pytest.mark.parametrize("band", SAMPLE_BANDS)
def test_sample_keeps_the_followed_jobs_idle_sessions(band: int, cluster: Cluster,
                                                      mon: psycopg.Connection[Any]) -> None:
    """An idle session is sampled only when it is the followed job's (pids):
    a loader between batches whose last statement was not a COPY."""
    idler = _conn(cluster, "some loader")
    try:
        idler.execute("SELECT 1")
        pid = idler.info.backend_pid

        def pids_seen(pids: list[int]) -> set[int]:
            (doc,) = mon.execute(_text("sample", band),  # type: ignore[misc]
                                 {"db": None, "pids": pids, "backup": False,
                                  "types": [], **APPS}).fetchone()
            return {b.pid for b in DbSample.from_json(doc, 1.0).backends}

        assert pid not in pids_seen([])
        assert pid in pids_seen([pid])
    finally:
        idler.close()


@pytest.mark.integration
def test_sampler_round_trip(target: ConnTarget, busy: dict[str, int]) -> None:
    """The product's own sampler (the band it picks for 15, bound parameters,
    prepared statements) gives the same backends."""
    sampler = DbSampler(target, database_filter=DB)
    try:
        facts = sampler.open()
        assert sql.band("sample", facts.version_num) == 140000
        for _ in range(3):  # prepared after the first execution
            s = sampler.sample()
            assert s.error is None, s.error
            assert busy["waiter"] in {b.pid for b in s.backends}
        assert sampler.query_json("locks", {"pid": busy["holder"]})
    finally:
        sampler.close()


@pytest.mark.integration
@pytest.mark.parametrize("band", [v for n, v in BANDS if n == "logical_sync"])
def test_logical_sync_part(band: int, target: ConnTarget, mon: psycopg.Connection[Any],
                           cluster: Cluster) -> None:
    """A driver's part of the sample (jobs/logical_sync.py): alone, and in
    the sample's round trip as the sampler sends it (no subscription here:
    an empty list; tests/test_logical_sync.py has one)."""
    (doc,) = mon.execute(_text("logical_sync", band)).fetchone()  # type: ignore[misc]
    assert doc == []
    assert mon.execute(_text("logical_conninfo", 100000)).fetchone() == (None,)
    # the publisher's limits, read with its table sizes: settings and the
    # names of the slots and walsenders in use (none here)
    (limits,) = mon.execute(_text("logical_publisher", 100000)).fetchone()  # type: ignore[misc]
    assert limits["max_wal_senders"] > 0 and limits["max_replication_slots"] > 0
    assert limits["slots"] == [] and limits["walsenders"] == []
    # the sync slots, read while a sync is followed (a physical slot is none)
    cluster.psql("SELECT pg_create_physical_replication_slot('bands_sync_1')")
    try:
        assert mon.execute(_text("logical_slots", 100000)).fetchone() == ([],)
    finally:
        cluster.psql("SELECT pg_drop_replication_slot('bands_sync_1')")
    sampler = DbSampler(target, database_filter=DB,
                        parts=("logical_sync", "logical_slots", "no_such_part"),
                        server_types=("logical replication worker",))
    try:
        sampler.open()
        s = sampler.sample()
        assert s.error is None and s.parts == {"logical_sync": [], "logical_slots": []}
        assert s.backends
    finally:
        sampler.close()


@pytest.mark.integration
@pytest.mark.parametrize("band", [v for n, v in BANDS if n == "tables"])
def test_tables(band: int, mon: psycopg.Connection[Any]) -> None:
    (rows,) = mon.execute(_text("tables", band)).fetchone()  # type: ignore[misc]
    by_name = {(r[1], r[2]): r for r in rows}
    assert {("public", "t"), ("public", "locked"), ("public", "loading")} <= set(by_name)
    oid, schema, rel, kind, relpages, reltuples, toast_pages, path = by_name[("public", "t")]
    assert kind == "r" and relpages > 0 and reltuples >= 2000 and toast_pages >= 0
    assert path.startswith("base/")


@pytest.mark.integration
@pytest.mark.parametrize("band", [v for n, v in BANDS if n == "large_objects"])
def test_large_objects(band: int, cluster: Cluster, mon: psycopg.Connection[Any]) -> None:
    (before,) = mon.execute(_text("large_objects", band)).fetchone()  # type: ignore[misc]
    cluster.psql("SELECT lo_from_bytea(0, 'a large object'::bytea)", dbname=DB)
    cluster.psql("VACUUM ANALYZE pg_largeobject", dbname=DB)
    (d,) = mon.execute(_text("large_objects", band)).fetchone()  # type: ignore[misc]
    assert set(d) == {"count", "pages"} and d["count"] == before["count"] + 1
    assert d["pages"] >= 1


@pytest.mark.integration
@pytest.mark.parametrize("band", [v for n, v in BANDS if n == "done"])
def test_done(band: int, mon: psycopg.Connection[Any]) -> None:
    (d,) = mon.execute(_text("done", band)).fetchone()  # type: ignore[misc]
    assert set(d) == {"loaded", "relations", "constraints", "maintained", "large_object_pages"}
    assert "public.t_pkey" in d["relations"]
    # pg_largeobject's live rows from the statistics (never the table: a
    # superuser's alone): a count, not null
    assert isinstance(d["large_object_pages"], int) and d["large_object_pages"] >= 0
    # the fixture's ANALYZE: when each table was last vacuumed / analyzed by hand
    by_name = {r[1]: r for r in d["maintained"]}
    assert by_name["public.t"][3] is not None and isinstance(by_name["public.t"][0], int)
    assert {"public.t_pkey", "public.loading_fk"} <= set(d["constraints"])


@pytest.mark.integration
@pytest.mark.parametrize("band", [v for n, v in BANDS if n == "locks"])
def test_locks(band: int, mon: psycopg.Connection[Any], busy: dict[str, int]) -> None:
    q = _text("locks", band)
    (held,) = mon.execute(q, {"pid": busy["holder"]}).fetchone()  # type: ignore[misc]
    assert {"relation": "public.locked", "mode": "AccessExclusiveLock", "granted": True,
            "locktype": "relation", "blocked_by": None} in held
    (awaited,) = mon.execute(q, {"pid": busy["waiter"]}).fetchone()  # type: ignore[misc]
    waiting = [lk for lk in awaited if not lk["granted"]]
    assert waiting == [{"relation": "public.locked", "mode": "AccessShareLock",
                        "granted": False, "locktype": "relation",
                        "blocked_by": [busy["holder"]]}]
    (none,) = mon.execute(q, {"pid": 0}).fetchone()  # type: ignore[misc]
    assert none == []


@pytest.mark.integration
def test_advise(mon: psycopg.Connection[Any]) -> None:
    """Every advise band this server can run (a band for a newer server names
    its views: tests/test_versions.py runs advise on those servers)."""
    bands = [v for n, v in BANDS if n == "advise" and v <= mon.info.server_version]
    assert bands
    for band in bands:
        _check_advise_band(band, mon)


def _check_advise_band(band: int, mon: psycopg.Connection[Any]) -> None:
    (d,) = mon.execute(_text("advise", band)).fetchone()  # type: ignore[misc]
    assert d["connections_in_use"] >= 1 and d["database_exists"] is True
    assert d["locks_in_use"] >= 0 and d["lockable_tables"] >= 3 and d["objects"] >= 5
    assert set(d["checkpoints"]) == {"requested", "timed", "since"}
    assert d["can_create_temp"] is True
    s = d["settings"]
    assert s["max_connections"][0] == "60" and s["block_size"] == ["8192", None]
    assert "reserved_connections" not in s  # a 16+ setting: absent on 15, not an error


@pytest.mark.integration
def test_advise_subscription_bands(mon: psycopg.Connection[Any]) -> None:
    """A subscription's advice (advise/subscription.py) on a server with no
    subscription and no publication: its shapes, empty where they list;
    tests/test_advise_subscription.py runs them on a publisher and a
    subscriber."""
    (sub,) = mon.execute(_text("advise_subscriber", 100000),  # type: ignore[misc]
                         {"name": "none"}).fetchone()
    assert sub["subscription"] is None and sub["others"]["workers"] == 0
    assert sub["others"]["bgworkers"] >= 1  # the logical replication launcher
    assert int(sub["settings"]["max_logical_replication_workers"]) >= 1
    (tables,) = mon.execute(_text("advise_subscriber_tables", 100000),  # type: ignore[misc]
                            {"tables": ["public.t", "public.nosuch"]}).fetchone()
    (n,) = mon.execute("SELECT count(*) FROM pg_index "  # type: ignore[misc]
                       "WHERE indrelid = 'public.t'::regclass").fetchone()
    assert tables == [{"table": "public.t", "relkind": "r", "indexes": n}] and n >= 1
    (pub,) = mon.execute(_text("advise_publisher", 100000),  # type: ignore[misc]
                         {"pubs": ["p"], "slot": None, "appname": None, "sync": None}).fetchone()
    assert pub["publications"] is None and pub["tables"] == []
    assert pub["others"] == {"walsenders": 0, "slots": 0}
    assert {"wal_level", "max_wal_senders", "max_replication_slots"} <= set(pub["settings"])


@pytest.mark.integration
@pytest.mark.parametrize("band", [v for n, v in BANDS if n == "postdata"])
def test_postdata(band: int, mon: psycopg.Connection[Any]) -> None:
    """A copy's source: its indexes with the constraint each backs, and its
    foreign keys with the table they reference."""
    (d,) = mon.execute(_text("postdata", band)).fetchone()  # type: ignore[misc]
    assert set(d) == {"indexes", "fks"}
    assert ["public", "t", "t_pkey", "t_pkey", "p"] in d["indexes"]
    (fk,) = [f for f in d["fks"] if f[2] == "loading_fk"]
    assert fk[:2] == ["public", "loading"] and fk[3] == "public.t"


@pytest.mark.integration
@pytest.mark.parametrize("band", SAMPLE_BANDS)
def test_sample_shows_a_vacuum_of_the_followed_job(band: int, cluster: Cluster,
                                                   mon: psycopg.Connection[Any]) -> None:
    """A VACUUM (throttled by its own cost settings so that it lasts): its
    statement kept for the followed job's session, its progress row (heap
    blocks) under 'maint' with the table's name."""
    import threading

    vac = _conn(cluster, "some loader")
    pid = vac.info.backend_pid
    # a table of its own: the module's sessions hold locks on t (a CREATE
    # INDEX CONCURRENTLY waits there), which a VACUUM would queue behind
    vac.execute("CREATE TABLE IF NOT EXISTS vac (a int, b text)")
    vac.execute("INSERT INTO vac SELECT g, md5(g::text) FROM generate_series(1, 3000) g")
    vac.execute("SET vacuum_cost_delay = 100")
    vac.execute("SET vacuum_cost_limit = 1")
    done = threading.Event()

    def run() -> None:
        try:
            vac.execute("VACUUM (ANALYZE) vac")
        except psycopg.Error:
            pass  # cancelled below
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    try:
        deadline = time.monotonic() + 20
        seen = None
        while time.monotonic() < deadline and not done.is_set():
            (doc,) = mon.execute(_text("sample", band),  # type: ignore[misc]
                                 {"db": None, "pids": [pid], "backup": False,
                                  "types": [], **APPS}).fetchone()
            s = DbSample.from_json(doc, 1.0)
            rows = [m for m in s.maint if m.pid == pid]
            # past its first phase: the row shows up "initializing", its
            # heap blocks not yet counted (a quick machine sampled it there)
            if rows and rows[0].blocks_total:
                seen = (rows[0], next(b for b in s.backends if b.pid == pid))
                break
            time.sleep(0.05)
        assert seen is not None, "the VACUUM was never seen in progress"
        row, backend = seen
        assert row.command == "VACUUM" and row.relation == "public.vac" and row.datname == DB
        assert row.blocks_total and row.blocks_total > 0 and row.phase
        assert backend.query == "VACUUM (ANALYZE) vac"
        f = row.fraction
        assert f is not None and 0.0 <= f <= 0.95
    finally:
        with psycopg.connect(cluster.conninfo(DB), autocommit=True) as c:
            c.execute("SELECT pg_cancel_backend(%s)", (pid,))
        done.wait(10)
        vac.close()


@pytest.mark.integration
@pytest.mark.parametrize("band", SAMPLE_BANDS)
def test_backup_bands_only_when_asked(band: int, cluster: Cluster,
                                      mon: psycopg.Connection[Any]) -> None:
    """The bands only a physical backup needs (its progress view, WAL
    streams, the archiver, replication slots) are read when asked, and the
    slots say what WAL they keep."""
    cluster.psql("SELECT pg_create_physical_replication_slot('pgparmon_idle_slot', true)")
    try:
        (on,) = mon.execute(_text("sample", band),  # type: ignore[misc]
                            {"db": None, "pids": [], "backup": True, "types": [],
                             **APPS}).fetchone()
        (off,) = mon.execute(_text("sample", band),  # type: ignore[misc]
                             {"db": None, "pids": [], "backup": False, "types": [],
                              **APPS}).fetchone()
    finally:
        cluster.psql("SELECT pg_drop_replication_slot('pgparmon_idle_slot')")
    s_on, s_off = DbSample.from_json(on, 1.0), DbSample.from_json(off, 1.0)
    (slot,) = [x for x in s_on.slots or () if x[0] == "pgparmon_idle_slot"]
    assert slot[1] == "physical" and slot[2] is False and slot[4] is not None and slot[4] >= 0
    assert (slot[3] is not None) == (band >= 130000)  # wal_status arrived in 13
    assert s_on.archiver is not None and len(s_on.archiver) == 6  # last_archived_wal last
    # where WAL is written, the segment size and the checkpoint's pacing: a
    # backup's backlog and a spread checkpoint's bound (walwait)
    assert s_on.wal is not None
    lsn, seg, timeout, target = s_on.wal
    assert lsn is not None and lsn > 0 and seg == 16 << 20
    assert timeout == float(cluster.psql("SELECT setting FROM pg_settings "
                                         "WHERE name = 'checkpoint_timeout'").strip())
    assert target is not None and 0 < target <= 1
    assert s_off.slots is None and s_off.archiver is None and s_off.senders == ()
    assert s_off.wal is None
    assert s_off.basebackups == () or band < 130000
