"""Data items a restore ran between two samples (small tables load in
milliseconds): told from pg_restore's own order (jobs/pg_restore.py,
`_ran_unseen`), so that a restore of many small tables does not read a few
percent done, with an ETA of a minute, when it is nearly over."""

from __future__ import annotations

import json
import subprocess

import pytest
from support import dumped, pgparmon_cmd

from pgparmon.analyze.items import Item
from pgparmon.analyze.progress import Tracker
from pgparmon.cmdline import parse_client_cmdline
from pgparmon.jobs.base import Job
from pgparmon.jobs.pg_restore import PgRestore, RestoreState, _ran_unseen
from pgparmon.jobs.registry import driver_for
from pgparmon.cluster import Cluster


def _tracker(jobs: int | None, sizes: list[float], args: list[str] | None = None) -> Tracker:
    job = Job(kind="pg_restore", database="shop", client_pid=100, jobs=jobs, usename="loader",
              args=parse_client_cmdline(args, PgRestore.client_specs) if args else None)
    tr = Tracker(job, driver_for(job.kind))
    for i, size in enumerate(sizes):
        key = str(3000 + i)
        tr.add(Item(key=key, kind="data", relation=f"public.t{i}", name=f"public.t{i}",
                    size=size, work=size, file=f"/arch/{key}.dat.gz"))
    return tr


def _states(tr: Tracker) -> list[str]:
    return [tr.items[k].state[0] for k in sorted(tr.items)]


def test_with_jobs_the_largest_file_goes_first_ties_by_dump_id() -> None:
    # sizes: 3000-3001 large, then eight equal small ones
    tr = _tracker(2, [900.0, 800.0] + [100.0] * 8)
    for k in ("3000", "3001"):
        tr.finish(tr.items[k], 1.0)
    # a worker on 3006 (the fifth small one), the other shows no item: of
    # 3002-3005 the latest may still run, the others are done
    _ran_unseen(tr, 2.0, {"3006": 7})
    assert _states(tr) == list("ddddd" "pp" "ppp"), _states(tr)
    assert tr.items["3005"].state == "pending"
    # both workers busy: every item before the latest seen is done
    _ran_unseen(tr, 3.0, {"3008": 7, "3007": 8})
    assert _states(tr)[:7] == list("ddddddd")
    assert tr.driver.job_fields(tr, [], "running")["items_inferred"] == 5


def test_in_size_order_an_early_small_table_waits_for_the_large_ones() -> None:
    # the largest (3003) is handed out first: seen running, it says nothing
    # of the smaller ones before it in dump-id order
    tr = _tracker(2, [100.0, 100.0, 100.0, 5000.0])
    _ran_unseen(tr, 1.0, {"3003": 7, "3000": 8})
    assert _states(tr) == list("pppp")


def test_one_connection_restores_in_archive_order_but_not_a_lists() -> None:
    tr = _tracker(None, [100.0, 5000.0, 300.0, 200.0])
    _ran_unseen(tr, 1.0, {"3003": 7})
    assert _states(tr) == list("dddp")
    assert tr.driver.job_fields(tr, [], "running") == {"items_inferred": 3}
    # -L: the list says the order (it may reorder the archive)
    tr = _tracker(None, [100.0, 5000.0, 300.0, 200.0],
                  ["pg_restore", "-L", "my.list", "-d", "shop", "/arch"])
    _ran_unseen(tr, 1.0, {"3003": 7})
    assert _states(tr) == list("pppp")
    assert "items_inferred" not in tr.driver.job_fields(tr, [], "running")
    assert isinstance(tr.driver.new_state(), RestoreState)


@pytest.fixture(scope="module")
def many_small(cluster: Cluster) -> str:
    db = "unseen"
    cluster.psql(f"CREATE DATABASE {db}")
    cluster.psql("; ".join(f"CREATE TABLE t{i} AS SELECT g AS id, md5(g::text) AS v "
                           f"FROM generate_series(1, 10000) g" for i in range(300)), dbname=db)
    return db


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["d", "c"])
def test_a_restore_of_many_small_tables_is_followed_as_it_goes(cluster: Cluster,
                                                               many_small: str,
                                                               fmt: str) -> None:
    """300 tables of 10,000 rows, pg_restore -j 2: each loads in tens of
    milliseconds, most between two samples. Mid-run the view says how far
    the run is (items done climb with progress, from pg_restore's order),
    not a few percent. A custom archive's order is its items' data lengths,
    read from its TOC's offsets (custom_archive.py)."""
    db = many_small
    with dumped(cluster, db, "pgparmon-unseen-", fmt) as arch:
        cluster.psql(f"DROP DATABASE IF EXISTS {db}_r")
        cluster.psql(f"CREATE DATABASE {db}_r")
        res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.2", "--",
                                          cluster.client("pg_restore"), "-j", "2", "-d",
                                          f"{db}_r", str(arch)),
                             capture_output=True, text=True, timeout=300, env=cluster.env())
    assert res.returncode == 0, res.stderr
    docs = [d for d in (json.loads(ln) for ln in res.stdout.splitlines()
                        if ln.startswith("{")) if "job" in d]
    trace = [(d["elapsed_s"], d["job"]["state"], d["job"]["items_done"], d["job"]["progress"],
              d["job"].get("items_inferred")) for d in docs]
    running = [d["job"] for d in docs if d["job"]["state"] == "running"
               and d["job"]["items_done"] > 0]
    assert running, trace
    # the last running sample: most of the tables done, and said to be inferred
    last = running[-1]
    assert last["items_done"] >= 150 and last["progress"] >= 0.5, trace
    assert last["items_inferred"] > 0, trace
    assert docs[-1]["job"]["state"] == "finished" and docs[-1]["job"]["items_done"] == 300
