"""vacuumdb -j N against a real server, beyond tests/test_vacuumdb.py's
runs: what its plan sizes an ANALYZE by (the sample the server reads, not
the table), and the jobs discovery makes of a vacuumdb whose parent holds a
transaction open."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg
import pytest
from support import Lines, jobs_found, pgparmon_cmd

from pgparmon.cluster import Cluster

DB = "vaclive"


@pytest.fixture(scope="module")
def livedb(cluster: Cluster) -> str:
    """Tables of ~1,300 pages whose ANALYZE samples fewer (the database's
    default target 2: 600 blocks): one at the default, one whose columns
    are set lower (1: 300 blocks), one whose extended statistics are set
    higher (3: 900 blocks); a small one read whole; `held` for a lock."""
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}")
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql(f"ALTER DATABASE {DB} SET default_statistics_target = 2")
    fill = "SELECT g, repeat('x', 200) FROM generate_series(1, 45000) g"
    cluster.psql(
        "CREATE TABLE held (id int); INSERT INTO held VALUES (1); "
        f"CREATE TABLE sampled (id int, v text); INSERT INTO sampled {fill}; "
        f"CREATE TABLE pinned (id int, v text); INSERT INTO pinned {fill}; "
        "ALTER TABLE pinned ALTER id SET STATISTICS 1, ALTER v SET STATISTICS 1; "
        f"CREATE TABLE ext (id int, v text); INSERT INTO ext {fill}; "
        "CREATE STATISTICS ext_s (ndistinct) ON id, v FROM ext; "
        "ALTER STATISTICS ext_s SET STATISTICS 3; "
        "CREATE TABLE tiny (id int); INSERT INTO tiny SELECT generate_series(1, 1000)",
        dbname=DB)
    cluster.psql("VACUUM", dbname=DB)  # relpages, which vacuumdb orders by
    return DB


def _sample_blocks(cluster: Cluster, dbname: str, table: str) -> int:
    """The blocks the server's ANALYZE of `table` samples
    (pg_stat_progress_analyze.sample_blks_total), read from an ANALYZE
    slowed to a crawl by the cost-based delay, then cancelled."""
    import threading

    work = psycopg.connect(cluster.conninfo(dbname), autocommit=True)
    pid = work.info.backend_pid
    work.execute("SET vacuum_cost_delay = 100; SET vacuum_cost_limit = 1")

    def analyze() -> None:
        with contextlib.suppress(psycopg.errors.QueryCanceled):
            work.execute(f"ANALYZE {table}")

    t = threading.Thread(target=analyze, daemon=True)
    t.start()
    try:
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as look:
            deadline = time.monotonic() + 60
            while True:
                row = look.execute("SELECT sample_blks_total FROM pg_stat_progress_analyze "
                                   "WHERE pid = %s AND sample_blks_total > 0",
                                   (pid,)).fetchone()
                if row:
                    look.execute("SELECT pg_cancel_backend(%s)", (pid,))
                    return int(row[0])
                assert t.is_alive() and time.monotonic() < deadline, "no ANALYZE progress"
                time.sleep(0.02)
    finally:
        t.join(timeout=60)
        work.close()


@pytest.mark.integration
def test_an_analyzes_work_is_its_sample_not_its_table(cluster: Cluster, livedb: str) -> None:
    """vacuumdb -Z followed by `run`: each table's planned work is what the
    server's ANALYZE reads (its sample blocks: 300 rows per target, the
    target its columns and extended statistics set), not its size."""
    tables = ("sampled", "pinned", "ext", "tiny")
    truth = {t: _sample_blocks(cluster, livedb, t) for t in tables}
    with psycopg.connect(cluster.conninfo(livedb), autocommit=True) as c:
        pages = dict(c.execute("SELECT relname, relpages FROM pg_class WHERE relname = "
                               "ANY(%s)", (list(tables),)).fetchall())
    assert truth == {"sampled": 600, "pinned": 300, "ext": 900, "tiny": pages["tiny"]}
    assert all(pages[t] > 1000 for t in ("sampled", "pinned", "ext"))
    gate = psycopg.connect(cluster.conninfo(livedb), autocommit=True)
    gate.execute("BEGIN; LOCK TABLE held IN SHARE UPDATE EXCLUSIVE MODE")
    run = Lines(subprocess.Popen(
        pgparmon_cmd("run", "--json", "--interval", "0.2", "--", cluster.client("vacuumdb"),
                     "-j", "2", "-Z", *(f"-t{t}" for t in (*tables, "held")), "-d", livedb),
        env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        run.wait_for(lambda s: bool(s["job"]["items_total"]), "the plan")
        gate.execute("COMMIT")
        _, summary, _ = run.finish()
    finally:
        gate.close()
    assert run.proc.returncode == 0 and summary["state"] == "finished", run.stderr[-1500:]
    work = {i["relation"].split(".")[-1]: i["work"] for i in summary["items"]}
    assert {t: work[t] / 8192 for t in tables} == truth
    assert all(work[t] < pages[t] * 8192 for t in ("sampled", "pinned", "ext"))


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


HOLDER = r"""
import subprocess, sys, time
import psycopg

conninfo, vacuumdb = sys.argv[1:3]
conn = psycopg.connect(conninfo)  # idle in transaction from here, holding the lock
conn.execute("LOCK TABLE held IN SHARE UPDATE EXCLUSIVE MODE")
subprocess.Popen([vacuumdb, "-j", "2", "-Z", "-t", "held", "-d", conninfo])
time.sleep(120)
"""


@pytest.mark.integration
def test_a_vacuumdb_under_a_program_holding_a_transaction_is_its_own_job(
        cluster: Cluster, livedb: str, workdir: Path) -> None:
    """A program idle in a transaction (holding the table's lock) that
    starts vacuumdb: the vacuumdb is a job of its own (only pg_dump and
    pg_restore are a migration tool's steps), its sessions its workers."""
    from test_copy_jobs import _kill_tree

    script = workdir / "holder.py"
    script.write_text(HOLDER)
    tool = subprocess.Popen([sys.executable, str(script), cluster.conninfo(livedb),
                             cluster.client("vacuumdb")], env=_env())
    try:
        deadline = time.monotonic() + 60
        with psycopg.connect(cluster.conninfo(livedb), autocommit=True) as conn:
            while not conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name = 'vacuumdb'").fetchone()[0]:  # type: ignore[index]
                assert tool.poll() is None, "the holding program exited"
                assert time.monotonic() < deadline, "vacuumdb never waited for the lock"
                time.sleep(0.05)
            holding = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = "
                                   "'idle in transaction' AND datname = %s",
                                   (livedb,)).fetchone()[0]  # type: ignore[index]
        assert holding == 1  # the parent's session: what made it a "step" before
        db, jobs = jobs_found(cluster, livedb)
        vac = next(p.pid for p in psutil.Process(tool.pid).children() if p.name() == "vacuumdb")
        mine = [j for j in jobs if j.client_pid in (tool.pid, vac)]
        assert len(mine) == 1, [j.describe() for j in jobs]
        assert (mine[0].kind, mine[0].client_pid) == ("vacuumdb", vac), mine[0].describe()
        waiting = {b.pid for b in db.backends if b.application_name == "vacuumdb"}
        assert waiting and waiting <= mine[0].pid_hint
    finally:
        _kill_tree(tool)
