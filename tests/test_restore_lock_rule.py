"""pg_restore -j's own lock rule against a real pg_restore: a table's
primary key (ALTER TABLE ... ADD PRIMARY KEY, an exclusive entry) and its
index builds never run at the same time, and the schedule the advice and
the ETA share (`WorkItem.tables`, filled by `jobs.pg_restore.plan_archive`)
keeps them apart in the same order (`pg_restore -v` says when each item
was launched and finished)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import dumped

from pgparmon.advise.inventory import restore_inventory
from pgparmon.analyze.schedule import simulate
from pgparmon.cluster import Cluster

integration = pytest.mark.integration
DB = "lock_rule"
JOBS = 4
# pg_restore's processes share one stderr and its logging writes the
# "pg_restore: " prefix apart from the message: under load another
# process's line lands between them, so only the message is matched
EVENT = re.compile(r"(launching|finished) item (\d+) (INDEX|CONSTRAINT) ")


@pytest.fixture(scope="module")
def archive(cluster: Cluster) -> Iterator[Path]:
    """One table with a primary key and two more indexes, one without."""
    cluster.psql(f"CREATE DATABASE {DB}")
    cluster.psql("CREATE TABLE t (id int, a int, h text); "
                 "INSERT INTO t SELECT g, g % 97, md5(g::text) FROM generate_series(1, 60000) g; "
                 "ALTER TABLE t ADD PRIMARY KEY (id); CREATE INDEX ON t (a); "
                 "CREATE INDEX ON t (h); "
                 "CREATE TABLE u AS SELECT g AS id FROM generate_series(1, 5000) g", dbname=DB)
    with dumped(cluster, DB, "pgparmon-lockrule-") as out:
        yield out


def _real_spans(cluster: Cluster, archive: Path) -> dict[str, tuple[int, int]]:
    """Each index and constraint item's (launch, finish) positions in
    pg_restore -v's order of events."""
    cluster.psql(f"DROP DATABASE IF EXISTS {DB}_r")
    cluster.psql(f"CREATE DATABASE {DB}_r")
    res = subprocess.run([cluster.client("pg_restore"), "-j", str(JOBS), "-v", "-d",
                          f"{DB}_r", str(archive)], env=cluster.env(), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    start: dict[str, int] = {}
    spans: dict[str, tuple[int, int]] = {}
    for n, m in enumerate(EVENT.finditer(res.stderr)):
        what, key = m.group(1), m.group(2)
        if what == "launching":
            start[key] = n
        else:
            spans[key] = (start[key], n)
    return spans


def _apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] <= b[0] or b[1] <= a[0]


@integration
def test_a_key_and_its_tables_index_builds_never_overlap_as_pg_restore_runs_them(
        cluster: Cluster, archive: Path) -> None:
    inv = restore_inventory(str(archive))
    on_t = [it for it in inv.items if it.table == "public.t" and it.deps]
    key = next(it for it in on_t if it.exclusive)
    builds = [it for it in on_t if not it.exclusive]
    assert len(builds) == 2 and key.tables == frozenset({"public.t"})
    real = _real_spans(cluster, archive)
    assert {key.key, *(b.key for b in builds)} <= set(real), real
    for b in builds:
        assert _apart(real[key.key], real[b.key]), (real, key.key, b.key)
    # the schedule keeps them apart too, and starts the one pg_restore started
    sim = {sp.key: (sp.start, sp.end) for sp in simulate(inv.items, JOBS, lambda k: 1e6).spans}
    for b in builds:
        assert _apart(sim[key.key], sim[b.key]), (sim, key.key, b.key)
    first_real = min((key, *builds), key=lambda it: real[it.key][0]).key
    first_sim = min((key, *builds), key=lambda it: sim[it.key][0]).key
    assert first_sim == first_real, (real, sim)
