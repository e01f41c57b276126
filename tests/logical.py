"""Helpers of the logical replication tests (tests/test_logical_sync.py on
the machine's version, tests/test_logical_sync_versions.py on the others):
the databases a subscription syncs and `pgparmon attach` on either side.

The sync is slowed by a trigger that naps per row on the subscriber's
tables (enabled ALWAYS, so it fires in the sync workers); a test that must
see it at its start holds it there with a lock on the subscriber's tables
(a sync worker opens its table before it creates its slot on the
publisher) and releases it once attach has seen what it waits for."""

from __future__ import annotations

import subprocess
from typing import Any

from support import Lines, pgparmon_cmd

from pgparmon.cluster import Cluster

# rows per table: uneven sizes, the largest with a primary key (an index to
# maintain), one small with an index, the others without
TABLES = {"big": (6000, "id int PRIMARY KEY, v text"), "mid": (2500, "id int, v text"),
          "small1": (300, "id int, v text"), "small2": (300, "id int UNIQUE, v text")}
NAP = ("CREATE FUNCTION nap() RETURNS trigger LANGUAGE plpgsql AS "
       "$$BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END$$;")
LOCK_ALL = "LOCK TABLE " + ", ".join(TABLES) + " IN SHARE MODE"


def schema(with_nap: bool) -> str:
    out = [f"CREATE TABLE {t} ({cols});" for t, (_n, cols) in TABLES.items()]
    if with_nap:
        out.append(NAP)
        for t in TABLES:
            out.append(f"CREATE TRIGGER nap BEFORE INSERT ON {t} FOR EACH ROW "
                       f"EXECUTE FUNCTION nap(); ALTER TABLE {t} ENABLE ALWAYS TRIGGER nap;")
    return "\n".join(out)


def databases(pub: Cluster, sub: Cluster, suffix: str = "", scale: float = 1.0) -> None:
    """src{suffix} on the publisher (TABLES' rows times scale, publication
    p{suffix}), dst{suffix} on the subscriber (the same tables, napping)."""
    pub.psql(f"CREATE DATABASE src{suffix}")
    sub.psql(f"CREATE DATABASE dst{suffix}")
    pub.psql(schema(False) + "".join(
        f"INSERT INTO {t} SELECT g, repeat('x', 100) FROM generate_series(1, {int(n * scale)}) g;"
        for t, (n, _c) in TABLES.items())
        + f"ANALYZE; CREATE PUBLICATION p{suffix} FOR ALL TABLES;", dbname=f"src{suffix}")
    sub.psql(schema(True), dbname=f"dst{suffix}")


def failing_databases(pub: Cluster, sub: Cluster, suffix: str) -> None:
    """src{suffix} / dst{suffix} for a sync that keeps failing: tables one
    and two (500 rows each) sync, dup's (50 rows, a unique key) fails on a
    row the subscriber has already (id 7) until the test deletes it."""
    pub.psql(f"CREATE DATABASE src{suffix}")
    sub.psql(f"CREATE DATABASE dst{suffix}")
    tables = ("CREATE TABLE one (id int, v text); CREATE TABLE two (id int, v text); "
              "CREATE TABLE dup (id int UNIQUE, v text);")
    pub.psql(tables + "INSERT INTO one SELECT g, 'x' FROM generate_series(1, 500) g; "
             "INSERT INTO two SELECT g, 'x' FROM generate_series(1, 500) g; "
             "INSERT INTO dup SELECT g, 'x' FROM generate_series(1, 50) g; ANALYZE; "
             f"CREATE PUBLICATION p{suffix} FOR ALL TABLES", dbname=f"src{suffix}")
    sub.psql(tables + "INSERT INTO dup VALUES (7, 'the subscriber''s own')",
             dbname=f"dst{suffix}")


def subscribe(pub: Cluster, sub: Cluster, suffix: str, extra_conninfo: str = "") -> None:
    """Subscription s{suffix} of dst{suffix} to publication p{suffix} of src{suffix}."""
    conninfo = f"{pub.conninfo('src' + suffix)} {extra_conninfo}".strip()
    sub.psql(f"CREATE SUBSCRIPTION s{suffix} CONNECTION '{conninfo}' PUBLICATION p{suffix}",
             dbname=f"dst{suffix}")


def start_attach(cl: Cluster, dbname: str, *extra: str) -> subprocess.Popen[str]:
    """`pgparmon attach --json` on dbname of cl (the subscriber's database
    or the publisher's)."""
    return subprocess.Popen(pgparmon_cmd("attach", "-h", str(cl.sockdir), "-p", str(cl.port),
                                         "-U", "postgres", "-d", dbname, "--json",
                                         "--interval", "0.3", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cl.env())


def table_states(sub: Cluster, dbname: str) -> str:
    """The distinct srsubstate of dbname's subscribed tables ('r': all ready)."""
    return sub.psql("SELECT string_agg(DISTINCT srsubstate::text, '') FROM "
                    "pg_subscription_rel", dbname=dbname).strip()


# ---- what every run of these tables must show, whatever the version ----------------

def check_subscriber_run(samples: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """A sync of TABLES followed on the subscriber from its start to its
    end: the tables counted by state in every sample, never finished while
    one is not ready; every table waiting, then copying (its worker's COPY,
    with bytes and rows), then ready; progress that only grows, to 1."""
    assert summary["state"] == "finished" and summary["kind"] == "logical_sync"
    assert {i["name"] for i in summary["items"]} == {f"public.{t}" for t in TABLES}
    for d in samples:
        counts = d["job"]["tables"]
        assert sum(counts.values()) == len(TABLES), counts
        if d["job"]["state"] == "finished":
            assert counts["ready"] == len(TABLES)
        else:  # never finished while a table is not ready
            assert d["job"]["state"] == "running"
    assert samples[-1]["job"]["state"] == "finished"
    seen: set[str] = set()
    for d in samples:
        seen.update(t["state"] for t in d["job"]["tables_not_ready"])
    assert {"waiting", "copying"} <= seen, seen
    copying = [w for d in samples for w in d["workers"] if w["phase"] == "copy"]
    assert {w["relation"] for w in copying} >= {"public.big", "public.mid"}
    assert any(w["bytes_done"] and w["tuples_done"] for w in copying)
    prog = [d["job"]["progress"] for d in samples if d["job"]["progress"] is not None]
    assert prog and prog == sorted(prog) and prog[-1] == 1.0, prog


def check_publisher_run(pub: Cluster, dbname: str, suboid: str, copying: dict[str, Any],
                        samples: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The same sync followed on the publisher (dbname) from its sync
    walsenders: `copying` is a sample with the big table's COPY TO under
    way. Sizes from the publisher's own catalog, its walsenders copying, no
    job progress or ETA (the total is the subscriber's), each table's
    progress only growing, one job to the end."""
    job = copying["job"]
    assert job["kind"] == "logical_sync" and job["side"] == "publisher"
    assert job["database"] == dbname and job["subscription"] == f"subscription oid {suboid}"
    size = int(pub.psql("SELECT relpages::int8 * current_setting('block_size')::int8 "
                        "FROM pg_class WHERE relname = 'big'", dbname=dbname))
    big = next(t for t in job["tables_not_ready"] if t["table"] == "public.big")
    assert big["size"] == size and big["rows"] and big["bytes"]
    assert job["progress_basis"] == "publisher catalog (this server's catalog)"
    assert all(w["phase"] == "copy" for w in copying["workers"] if w["relation"])
    assert "public.big" in {w["relation"] for w in copying["workers"]}
    assert all(d["job"]["progress"] is None and d["job"]["eta_s"] is None for d in samples
               if d["job"]["state"] == "running"), [(d["job"]["state"], d["job"]["progress"],
                                                     d["job"]["eta_s"]) for d in samples]
    assert "total unknown on the publisher" in (job["eta_reason"] or "")
    by_table: dict[str, list[float]] = {}
    for d in samples:
        for t in d["job"]["tables_not_ready"]:
            if t["progress"] is not None:
                by_table.setdefault(t["table"], []).append(t["progress"])
    assert by_table and all(p == sorted(p) and p[-1] <= 1.0 for p in by_table.values())
    assert summary["state"] == "finished" and summary["kind"] == "logical_sync"
    names = {i["name"] for i in summary["items"]}
    assert "public.big" in names and names <= {f"public.{t}" for t in TABLES}


def big_copying_on_publisher(d: dict[str, Any]) -> bool:
    """A publisher-side sample with the big table's COPY TO under way."""
    return any(t["table"] == "public.big" and (t["progress"] or 0) > 0
               for t in d["job"]["tables_not_ready"])


def follow_failing_sync(att: Lines, sub: Cluster, dbname: str, major: int) -> None:
    """A sync of failing_databases' tables followed by att on the subscriber
    (dbname): dup's sync fails and starts over, shown failing with the
    table and its count (15+: and sync_error_count; before 15 there is
    none: null), the job running, never finished; the other two tables get
    ready; once the subscriber's own row goes, dup syncs and the job
    finishes."""
    failing = att.wait_for(
        lambda d: any(t["table"] == "public.dup" and t["failures"] >= 2
                      for t in d["job"]["tables_not_ready"])
        and d["bottleneck"]["kind"] == "sync-failing", "the failing table, named")
    detail = failing["bottleneck"]["detail"]
    assert "public.dup" in detail and failing["job"]["state"] == "running"
    if major >= 15:
        assert failing["job"]["sync_errors"] >= 2 and "sync_error_count" in detail, failing
    else:
        assert failing["job"]["sync_errors"] is None and "sync_error_count" not in detail
    done = att.wait_for(lambda d: d["job"]["tables"]["ready"] == 2, "the other two tables ready")
    assert done["job"]["state"] == "running"
    assert [t["table"] for t in done["job"]["tables_not_ready"]] == ["public.dup"]
    sub.psql("DELETE FROM dup", dbname=dbname)
    samples, summary, err = att.finish(timeout=120)
    assert att.proc.returncode == 0 and summary["state"] == "finished", err[-1000:]
    assert all(d["job"]["state"] == "running" for d in samples[:-1])
    assert table_states(sub, dbname) == "r"


def server_major(cl: Cluster) -> int:
    return int(cl.psql("SHOW server_version_num").strip()) // 10000


def origins_setting(major: int) -> str:
    """The subscriber's limit on replication origins: its own setting from
    18 on, max_replication_slots before."""
    return "max_active_replication_origins" if major >= 18 else "max_replication_slots"


def follow_origins_short(pub: Cluster, sub: Cluster, suffix: str, major: int) -> None:
    """A sync whose subscriber has one replication origin left for its sync
    workers beside the apply worker's: the test holds all the others
    (origins made and advanced, each taking a slot of the limit), so the
    second sync worker fails to get one and starts over. attach names the
    version's setting with its value; once the test lets its origins go,
    the sync runs to its end."""
    name = origins_setting(major)
    limit = int(sub.psql(f"SHOW {name}").strip())
    held = int(sub.psql("SELECT count(*) FROM pg_replication_origin").strip())
    holders = [f"pgparmon_holder_{suffix}_{i}" for i in range(limit - 2 - held)]
    databases(pub, sub, suffix, scale=0.3)
    sub.psql("".join(f"SELECT pg_replication_origin_create('{h}'); "
                     f"SELECT pg_replication_origin_advance('{h}', '0/1'); " for h in holders))
    att = Lines(start_attach(sub, f"dst{suffix}", "--wait", "60"))
    try:
        subscribe(pub, sub, suffix)
        short = att.wait_for(lambda d: d["bottleneck"]["kind"] == "worker-slots" and any(
            t["failures"] >= 1 for t in d["job"]["tables_not_ready"]),
            "a sync worker failing for want of a replication origin, named")
        detail = short["bottleneck"]["detail"]
        assert f"{name} = {limit} " in detail and "origin on the subscriber" in detail, detail
        # the apply worker's among the others: one left for two sync workers
        assert f"with {limit - 1} other origin(s)" in detail and "leaves 1 for 2" in detail
        assert ("before PostgreSQL 18" in detail) == (major < 18), detail
        assert short["job"]["state"] == "running"
        sub.psql("".join(f"SELECT pg_replication_origin_drop('{h}'); " for h in holders))
        holders = []
        samples, summary, err = att.finish(timeout=120)
        assert att.proc.returncode == 0 and summary["state"] == "finished", err[-1000:]
        assert table_states(sub, f"dst{suffix}") == "r"
    finally:
        if att.proc.poll() is None:
            att.proc.kill()
        for h in holders:
            sub.psql(f"SELECT pg_replication_origin_drop('{h}')")
        sub.psql(f"DROP SUBSCRIPTION IF EXISTS s{suffix}", dbname=f"dst{suffix}")
