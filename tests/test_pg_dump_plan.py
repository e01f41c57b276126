"""pg_dump's plan waits for its table of contents while the leader reads
the catalog, and a dump gone before writing it did not complete."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import Lines, pgparmon_cmd, table_lock_held

from pgparmon.analyze.progress import Tracker
from pgparmon.jobs.registry import driver_for
from pgparmon.cluster import Cluster
from pgparmon.jobs.base import Job, state_of
from pgparmon.jobs.pg_dump import DumpState, _reading_catalog


def test_the_leader_is_reading_the_catalog(tmp_path: Path) -> None:
    d = tmp_path / "dump"
    assert not _reading_catalog(str(d))  # not made yet: pg_class after 3 samples
    d.mkdir()
    assert _reading_catalog(str(d))  # pg_dump made it, no toc.dat, no data
    (d / "3001.dat.gz").write_bytes(b"")
    assert not _reading_catalog(str(d))  # data without a TOC: plan from pg_class


def test_a_directory_of_many_objects_is_listed_at_a_bounded_cost(tmp_path: Path) -> None:
    """A dump of a million large objects writes a million files, and one
    listing of them takes longer than a sample: DirWatch lists the
    directory only once the listing's cost is a small share of the time
    since the last; between two, it stats the files it knows and those a
    client holds open, and counts the objects from their list's growth."""
    from pgparmon.jobs.large_objects import LO_FILES
    from pgparmon.source import DirWatch

    def add(first: int, n: int) -> None:
        for oid in range(first, first + n):
            (tmp_path / f"blob_{oid}.dat.gz").write_bytes(b"")
        with open(tmp_path / "blobs.toc", "a") as f:
            f.writelines(f"{oid} blob_{oid}.dat.gz\n" for oid in range(first, first + n))

    (tmp_path / "toc.dat").write_bytes(b"t" * 100)
    (tmp_path / "3001.dat.gz").write_bytes(b"d" * 10)
    add(16400, 300)

    def entries(files: tuple | None) -> dict[str, int]:
        assert files is not None
        return {Path(f.path).name: f.size for f in files}

    w = DirWatch(str(tmp_path))
    first = entries(w.read())
    assert first[LO_FILES] == 300 and first["3001.dat.gz"] == 10 and len(first) == 4
    w.cost = 1e9  # as if listing it took that long: no listing for a while
    add(16700, 200)
    (tmp_path / "3001.dat.gz").write_bytes(b"d" * 50)  # a table's file grows
    (tmp_path / "3002.dat.gz").write_bytes(b"e" * 7)  # a new one, not open
    (tmp_path / "3003.dat.gz").write_bytes(b"f" * 9)  # a new one a worker writes
    between = entries(w.read([str(tmp_path / "3003.dat.gz"),
                              str(tmp_path / "blob_16899.dat.gz")]))
    assert between[LO_FILES] == 500  # from blobs.toc: 200 lines more
    assert between["3001.dat.gz"] == 50 and between["3003.dat.gz"] == 9
    assert "3002.dat.gz" not in between and "blob_16899.dat.gz" not in between
    (tmp_path / "3003.dat.gz").unlink()
    assert "3003.dat.gz" not in entries(w.read())  # gone: dropped
    w.cost = 0.0  # a cheap listing: made every sample
    full = entries(w.read())
    assert full[LO_FILES] == 500 and full["3002.dat.gz"] == 7 and "3003.dat.gz" not in full


def test_a_dump_gone_before_its_toc_did_not_complete() -> None:
    tr = Tracker(Job(kind="pg_dump", database="db"), driver_for("pg_dump"))
    assert tr.driver.cut_short(tr, None) is None  # type: ignore[arg-type]
    st = state_of(tr, DumpState)  # what the driver keeps: its directory's toc.dat
    st.toc_written = False
    said = tr.driver.cut_short(tr, None)  # type: ignore[arg-type]
    assert said and "toc.dat" in said and "did not complete" in said
    st.toc_written = True
    assert tr.driver.cut_short(tr, None) is None  # type: ignore[arg-type]


@pytest.mark.integration
def test_attach_to_a_dump_of_thousands_of_tables_sees_it_finish(cluster: Cluster,
                                                                workdir: Path) -> None:
    """2000 tables: the leader reads the catalog for longer than three
    samples at 0.2 s before toc.dat exists. The plan waits for the TOC (a
    plan from pg_class, keyed by table, could never be finished by the data
    files, named by dump id: a successful dump of 10,000 tables ended
    "failed: 9997 item(s) not done"); attach, which cannot read pg_dump's
    exit status, sees every item done and the job finished."""
    cluster.psql("DROP DATABASE IF EXISTS manytables")
    cluster.psql("CREATE DATABASE manytables")
    for lo in range(0, 2000, 250):
        body = "".join(f"CREATE TABLE t{i} (id serial PRIMARY KEY, v text); "
                       f"INSERT INTO t{i} (v) VALUES ('x');" for i in range(lo, lo + 250))
        cluster.psql("BEGIN; " + body + " COMMIT;", dbname="manytables")
    # the leader waits for its lock on one table until attach has sampled
    # the job (on a busy machine attach's start-up outlasted this dump)
    with table_lock_held(cluster, "manytables", "t1999") as release:
        dump = subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                 str(workdir / "d"), "manytables"], env=cluster.env())
        try:
            att = Lines(subprocess.Popen(
                pgparmon_cmd("attach", "--json", "--interval", "0.2", "--pid", str(dump.pid),
                             "-h", str(cluster.sockdir), "-p", str(cluster.port), "-U",
                             "postgres", "-d", "manytables"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            att.wait_for(lambda s: True, "attach's first sample")
            release()
            _, summary, _ = att.finish(timeout=120)
        finally:
            assert dump.wait(timeout=120) == 0
    assert summary["state"] == "finished", summary["reason"]
    items = summary["items"]
    assert isinstance(items, list) and len(items) == 2000
    assert all(it["state"] == "done" for it in items)
    cluster.psql("DROP DATABASE manytables")
