"""vacuumdb -j N against a real server, beyond tests/test_vacuumdb.py's
runs: what its plan sizes an ANALYZE by (the sample the server reads, not
the table), and the jobs discovery makes of a vacuumdb whose parent holds a
transaction open."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg
import pytest
from support import jobs_found

from pgparmon.cluster import Cluster

DB = "vaclive"


@pytest.fixture(scope="module")
def livedb(cluster: Cluster) -> str:
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}")
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql("CREATE TABLE held (id int); INSERT INTO held VALUES (1)", dbname=DB)
    return DB


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
