"""pgparmon.advise.build_workers: the parallel workers the server gives a
restore's btree builds, its rule against a real server's, and the advice
that lends them where the schedule leaves cores free."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import pgparmon_cmd

from pgparmon.advise.build_workers import BuildWorkers
from pgparmon.cluster import Cluster, start_cluster

MB = 1 << 20


def settings(per: int = 2, mwm_kb: int = 65536, pool: int = 8, procs: int = 8,
             scan_pages: int = 1024) -> dict[str, list[str]]:
    return {"max_parallel_maintenance_workers": [str(per), None],
            "maintenance_work_mem": [str(mwm_kb), "kB"],
            "max_parallel_workers": [str(pool), None],
            "max_worker_processes": [str(procs), None],
            "min_parallel_table_scan_size": [str(scan_pages), "8kB"]}


@pytest.mark.parametrize(("heap_mb", "mwm_mb", "per", "want"), [
    (4, 1024, 2, 0),  # under min_parallel_table_scan_size (8 MB)
    (8, 1024, 2, 1),
    (23.9, 1024, 2, 1),
    (24, 1024, 2, 2),  # three times the threshold: one more
    (5000, 1024, 2, 2),  # at most max_parallel_maintenance_workers
    (5000, 1024, 8, 6),  # 8, 24, 72, 216, 648, 1944 MB: 6 below 5000
    (5000, 64, 8, 1),  # the default 64 MB: 32 MB a participant, one worker
    (5000, 63, 8, 0),
    (5000, 96, 8, 2),
])
def test_planned_follows_the_servers_rule(heap_mb: float, mwm_mb: int, per: int,
                                          want: int) -> None:
    bw = BuildWorkers.of(settings(per=per, mwm_kb=mwm_mb * 1024), 150000)
    assert bw is not None
    assert bw.planned(heap_mb * MB) == want


def test_of_reads_the_settings_and_says_none_when_builds_are_serial() -> None:
    bw = BuildWorkers.of(settings(pool=6, procs=4, scan_pages=2048), 160000)
    assert bw is not None
    assert (bw.max_per_build, bw.pool, bw.maintenance_work_mem, bw.min_scan_bytes) == \
        (2, 4, 64 * MB, 16 * MB)
    assert bw.planned(15 * MB) == 0  # under its 16 MB
    assert BuildWorkers.of(settings(), 100022) is None  # before 11: serial builds
    assert BuildWorkers.of(settings(per=0), 150000) is None
    assert BuildWorkers.of({}, 150000) is None  # settings not read
    assert BuildWorkers.of(settings(), None) is None


def test_an_int_keys_build_gains_nothing_a_text_keys_shares_its_sort() -> None:
    """An in-order int build's worth stays with the leader (its scan and
    write); what a costlier key adds is shared by the participants."""
    sp = BuildWorkers.speedup
    assert sp(1.0, 1) == sp(1.0, 3) == 1.0
    assert sp(2.0, 1) == 1.0
    assert sp(2.0, 2) == pytest.approx(2 / 1.5)
    assert sp(2.0, 3) == pytest.approx(1.5)
    assert sp(4.0, 1000) < 4.0 and sp(0.5, 4) == 1.0  # never below an int key's


def test_helpers_ask_only_for_builds_that_would_get_workers() -> None:
    bw = BuildWorkers(2, 8, 1024 * MB)
    h = bw.helpers({"1": (4 * MB, 2.0), "2": (30 * MB, 1.0), "3": (10 * MB, 2.0)}, cores=16)
    assert h is not None and dict(h.wants) == {"2": 2, "3": 1}
    assert h.pool == 8 and h.cores == 16
    # an int key's workers are lent (they take cores) but speed nothing up
    assert h.speedup("2", 3) == 1.0 and h.speedup("3", 2) == pytest.approx(2 / 1.5)
    assert bw.helpers({"1": (4 * MB, 2.0)}, cores=16) is None  # none planned
    assert bw.helpers({"2": (30 * MB, 2.0)}, cores=1) is None  # no core to lend


# ------------------------------------------------------------ a real server


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with start_cluster(prefix="pgparmon-buildworkers-",
                       settings={"max_worker_processes": "8",
                                 "max_parallel_workers": "8"}) as cl:
        yield cl


def _launched(cl: Cluster, table: str, workers: int, mwm: str) -> int:
    """The parallel workers the server launched for a btree build, from its
    own trace of the sort (trace_sort: one "begin index sort" line from each
    worker, and from the leader for its part and for its merge when the build
    is parallel; one line in all when it is serial)."""
    sql = (f"SET max_parallel_maintenance_workers = {workers}; SET maintenance_work_mem = "
           f"'{mwm}'; SET trace_sort = on; SET client_min_messages = log; "
           f"CREATE INDEX ix_{table} ON {table} (id); DROP INDEX ix_{table}")
    res = subprocess.run([cl.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
                         capture_output=True, text=True, env=cl.env(), timeout=120)
    assert res.returncode == 0, res.stderr
    begins = len(re.findall(r"begin index sort", res.stderr))
    return 0 if begins <= 1 else begins - 2


@pytest.mark.integration
def test_the_rule_gives_what_the_server_launches(cluster: Cluster) -> None:
    """Tables of 4, 12 and 30 MB, builds with and without the memory for a
    second worker: the count `planned` gives is the count the server's
    trace shows (the pool, 8, is free: nothing else runs)."""
    sizes = {"s4": 4, "s12": 12, "s30": 30}
    for name, mb in sizes.items():
        cluster.psql(f"CREATE TABLE {name} AS SELECT g AS id, repeat('x', 90) AS pad "
                     f"FROM generate_series(1, {mb * MB // 130}) g")
    seen = {}
    for name in sizes:
        heap = float(cluster.psql(f"SELECT pg_relation_size('{name}')").strip())
        for mwm_mb in (64, 1024):
            want = BuildWorkers.of(settings(per=2, mwm_kb=mwm_mb * 1024), 150000)
            assert want is not None
            got = _launched(cluster, name, 2, f"{mwm_mb}MB")
            seen[(name, mwm_mb)] = (want.planned(heap), got)
    assert all(w == g for w, g in seen.values()), seen
    # the cases the rule tells apart are all there: none, one, two
    assert {w for w, _ in seen.values()} == {0, 1, 2}, seen


@pytest.mark.integration
def test_the_restore_advice_lends_workers_to_a_text_keys_build(cluster: Cluster,
                                                               tmp_path: Path) -> None:
    """A 12 MB table with an int primary key and a text index, dumped: the
    restore advice into a database of the server's defaults (one worker a
    build at 64 MB of maintenance_work_mem) says which builds may take
    workers, and at -j 1 predicts less time than into a database where the
    server builds serially (max_parallel_maintenance_workers 0 there: what
    pg_restore's sessions would get too)."""
    cluster.psql("CREATE DATABASE pb_src")
    cluster.psql("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, "
                 "md5(g::text) || md5((g * 3)::text) FROM generate_series(1, 120000) g; "
                 "CREATE INDEX t_v ON t (v)", dbname="pb_src")
    arch = tmp_path / "pb.dump"
    subprocess.run([cluster.client("pg_dump"), "-Fd", "-f", str(arch), "pb_src"],
                   env=cluster.env(), check=True, capture_output=True)
    cluster.psql("CREATE DATABASE pb_par")
    cluster.psql("CREATE DATABASE pb_serial")
    cluster.psql("ALTER DATABASE pb_serial SET max_parallel_maintenance_workers = 0")
    docs = {}
    for db in ("pb_par", "pb_serial"):
        res = subprocess.run(pgparmon_cmd("advise", "-h", str(cluster.sockdir), "-p",
                                          str(cluster.port), "-U", "postgres", "-d", db,
                                          "--archive", str(arch), "--json"),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        docs[db] = json.loads(res.stdout)
    note = [n for n in docs["pb_par"]["notes"] if n.startswith("index builds: ")]
    assert len(note) == 1 and "2 may take up to 1 parallel worker(s)" in note[0] and \
        "1 of them sort keys that cost more than an int's" in note[0], note
    assert not [n for n in docs["pb_serial"]["notes"] if n.startswith("index builds: ")]
    one = {db: d["predictions"][0] for db, d in docs.items()}
    assert one["pb_par"]["jobs"] == one["pb_serial"]["jobs"] == 1
    assert one["pb_par"]["wall_s"] < one["pb_serial"]["wall_s"], one
