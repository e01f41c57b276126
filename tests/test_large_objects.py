"""pgparmon.advise.large_objects: a database's large objects in the dump's
and the restore's advice, itemised as pg_dump does (one item before 17,
items of 1000 from 17), from the server's catalogs and from real archives."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import pytest
from pgversions import bindir_for
from support import pgparmon_cmd

from pgparmon.advise.large_objects import (
    DUMP_BYTE_FACTOR,
    DUMP_OBJECT_BYTES,
    RESTORE_BYTE_FACTOR,
    RESTORE_OBJECT_BYTES,
    RESTORE_PRE_DATA_S,
    RESTORE_PRE_DATA_SHARE,
    archive_batches,
    dump_batches,
    work_items,
)
from pgparmon.cluster import Cluster, start_cluster
from pgparmon.toc import list_archive

OBJECTS = 2500


def test_dump_batches_follow_pg_dumps_version() -> None:
    """Before 17 one item holds every object; from 17 items of up to 1000,
    their bytes shared by count; without pages the bytes are unknown, and
    a note says so."""
    facts = {"count": 2500, "pages": 1000}
    one, notes = dump_batches(facts, 8192, 15)
    assert [(b.count, b.bytes) for b in one] == [(2500, 8192000.0)]
    assert "in one item, one worker (pg_dump before 17)" in notes[-1]
    many, notes = dump_batches(facts, 8192, 17)
    assert [b.count for b in many] == [1000, 1000, 500]
    assert sum(b.bytes or 0 for b in many) == pytest.approx(8192000.0)
    assert "in 3 item(s) of up to 1000 (pg_dump 17)" in notes[-1]
    unsized, notes = dump_batches({"count": 10, "pages": 0}, 8192, 16)
    assert unsized[0].bytes is None and "size unknown" in notes[0]
    assert dump_batches({"count": 0, "pages": 0}, 8192, 16) == ([], [])
    assert dump_batches(None, 8192, 16) == ([], [])


def test_an_objects_work_is_its_fixed_cost_and_its_bytes() -> None:
    items = work_items(dump_batches({"count": 2000, "pages": 100}, 8192, 17)[0],
                       DUMP_OBJECT_BYTES, DUMP_BYTE_FACTOR)
    assert [it.work for it in items] == pytest.approx(
        [1000 * DUMP_OBJECT_BYTES + 409600 * DUMP_BYTE_FACTOR] * 2)
    # handed out after the tables (no size), labelled with what they hold
    assert all(it.size == 0.0 for it in items)
    assert items[0].label.startswith("large objects (1000, ") and items[0].label.endswith(")")


# ------------------------------------------------------------ real servers


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with start_cluster(prefix="pgparmon-lo-") as cl:
        cl.psql("CREATE DATABASE los")
        cl.psql(f"SELECT lo_from_bytea(0, convert_to(repeat(md5(g::text), 60), 'UTF8')) "
                f"FROM generate_series(1, {OBJECTS}) g; "
                "CREATE TABLE t AS SELECT g AS id, md5(g::text) AS v "
                "FROM generate_series(1, 20000) g", dbname="los")
        cl.psql("VACUUM ANALYZE", dbname="los")
        cl.psql("VACUUM ANALYZE pg_largeobject", dbname="los")
        yield cl


def _advise(cl: Cluster, *args: str) -> dict:
    res = subprocess.run(pgparmon_cmd("advise", "-h", str(cl.sockdir), "-p", str(cl.port),
                                      "-U", "postgres", *args, "--json"),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.integration
def test_the_dump_advice_counts_the_large_objects(cluster: Cluster, tmp_path: Path) -> None:
    """2500 objects of ~2 kB beside a 20,000-row table: the dump's advice
    reads them from the catalogs, says pg_dump 15 dumps them in one item
    after the tables, and that item is the run's largest: no -j brings the
    prediction under it."""
    doc = _advise(cluster, "-d", "los", "--target", str(tmp_path / "d"))
    note = [n for n in doc["notes"] if "large object(s)" in n]
    assert len(note) == 1 and note[0].startswith(f"{OBJECTS} large object(s), ") and \
        "dumped in one item, one worker (pg_dump before 17) after the tables" in note[0], note
    inv = doc["inventory"]
    assert inv["largest_item"].startswith(f"large objects ({OBJECTS}, ")
    alone = inv["largest_item_bytes"]
    assert alone >= OBJECTS * DUMP_OBJECT_BYTES
    walls = [p["wall_s"] for p in doc["predictions"]]
    assert min(walls) >= 0.5 * walls[0], walls  # the objects' item bounds every j


@pytest.mark.integration
def test_the_restore_advice_reads_the_archives_lists_of_objects(cluster: Cluster,
                                                                tmp_path: Path) -> None:
    """pg_dump 15's -Fd archive: one data item of all the objects
    (blobs.toc), their files' bytes; the restore's advice says so."""
    arch = tmp_path / "a15"
    subprocess.run([cluster.client("pg_dump"), "-Fd", "-f", str(arch), "los"],
                   env=cluster.env(), check=True, capture_output=True)
    _, toc = list_archive(str(arch), cluster.client("pg_restore"))
    batches, notes = archive_batches(str(arch), toc)
    assert len(batches) == 1 and batches[0].count == OBJECTS
    # each object's text: 60 md5 strings, 1920 bytes
    assert batches[0].bytes == pytest.approx(OBJECTS * 1920)
    assert notes == [f"{OBJECTS} large object(s), 4.8 MB, in 1 item(s): one worker restores "
                     "them all"]
    cluster.psql("CREATE DATABASE los_r")
    doc = _advise(cluster, "-d", "los_r", "--archive", str(arch))
    assert notes[0] in doc["notes"]
    assert doc["inventory"]["largest_item"].startswith(f"large objects ({OBJECTS}, ")
    # their metadata is the pre-data's, serial before any worker: in every
    # j's serial part, not in the data item
    assert all(p["serial_s"] >= OBJECTS * RESTORE_PRE_DATA_S - 0.01  # (rounded)
               for p in doc["predictions"])
    assert batches[0].count and work_items(batches, RESTORE_OBJECT_BYTES * (
        1 - RESTORE_PRE_DATA_SHARE), RESTORE_BYTE_FACTOR)[0].work < work_items(
        batches, RESTORE_OBJECT_BYTES, RESTORE_BYTE_FACTOR)[0].work
    # a custom archive: counted from its TOC (one BLOB entry an object), bytes unknown
    custom = tmp_path / "c15.dump"
    subprocess.run([cluster.client("pg_dump"), "-Fc", "-f", str(custom), "los"],
                   env=cluster.env(), check=True, capture_output=True)
    _, toc = list_archive(str(custom), cluster.client("pg_restore"))
    batches, notes = archive_batches(str(custom), toc)
    assert [(b.count, b.bytes) for b in batches] == [(OBJECTS, None)]
    assert notes == [f"{OBJECTS} large object(s) in 1 item(s): one worker restores them all "
                     "(their bytes are not in the archive's TOC: counted by their number)"]
    # with its data's extent: sized by its length, as pg_restore -j hands
    # it out, and that length a floor of the objects' bytes (their 4.8 MB
    # of text repeat within each object: gzip keeps under a twentieth)
    from pgparmon.custom_archive import data_extents

    ext = data_extents(str(custom))
    assert ext is not None
    batches, notes = archive_batches(str(custom), toc, ext.by_id)
    (b,) = batches
    (length,) = [n for k, (_, n) in ext.by_id.items() if str(k) == b.key]
    assert b.count == OBJECTS and b.size == b.bytes == float(length)
    assert 0 < length < OBJECTS * 1920 / 20
    assert "taken as their data's length in the archive" in notes[0]
    doc = _advise(cluster, "-d", "los_r", "--archive", str(custom))
    assert doc["inventory"]["largest_item"].startswith(f"large objects ({OBJECTS}, ")


@pytest.mark.integration
def test_pg_dump_17_itemises_the_objects_by_1000(cluster: Cluster, tmp_path: Path) -> None:
    """pg_dump 17 of the same database: three data items (1000, 1000, 500),
    each with its own list (blobs_<id>.toc), in a directory archive and,
    from the TOC's metadata ranges, in a custom one."""
    bindir = bindir_for(17)
    arch = tmp_path / "a17"
    subprocess.run([str(bindir / "pg_dump"), "-Fd", "-f", str(arch), "los"],
                   env=cluster.env(), check=True, capture_output=True)
    _, toc = list_archive(str(arch), str(bindir / "pg_restore"))
    batches, notes = archive_batches(str(arch), toc)
    assert sorted(b.count for b in batches) == [500, 1000, 1000], batches
    assert sum(b.bytes or 0 for b in batches) == pytest.approx(OBJECTS * 1920)
    assert notes[0].startswith(f"{OBJECTS} large object(s), ") and "in 3 item(s)" in notes[0]
    custom = tmp_path / "c17.dump"
    subprocess.run([str(bindir / "pg_dump"), "-Fc", "-f", str(custom), "los"],
                   env=cluster.env(), check=True, capture_output=True)
    _, toc = list_archive(str(custom), str(bindir / "pg_restore"))
    batches, _ = archive_batches(str(custom), toc)
    # the OID ranges of consecutive objects: their counts exactly
    assert sorted(b.count for b in batches) == [500, 1000, 1000], batches
    assert all(b.bytes is None for b in batches)


@pytest.mark.integration
def test_a_dumps_object_files_are_one_entry_of_a_sample(cluster: Cluster,
                                                        tmp_path: Path) -> None:
    """pg_dump -Fd writes a file an object: the sample's view of the
    directory counts them in one entry (by name, no stat), so that a
    database of many costs no sample, nor its recording, their number. A
    followed dump of the 2500 objects records a handful of file entries a
    sample, and ends finished."""
    from pgparmon.record import read_recording
    from pgparmon.jobs.large_objects import LO_FILES
    from pgparmon.source import dir_sizes

    arch = tmp_path / "a"
    rec = tmp_path / "rec.jsonl.gz"
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--record", str(rec),
                                      "--", cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                      str(arch), "los"),
                         capture_output=True, text=True, timeout=300, env=cluster.env())
    assert res.returncode == 0, res.stderr
    files = dir_sizes(str(arch))
    assert files is not None
    lo = [f for f in files if f.path.endswith(LO_FILES)]
    assert [f.size for f in lo] == [OBJECTS]  # how many, in one entry
    assert not [f for f in files if "/blob_" in f.path and not f.path.endswith(LO_FILES)]
    assert {Path(f.path).name for f in files} >= {"toc.dat", "blobs.toc"}
    snaps = [v for k, v in read_recording(str(rec)).events if k == "snapshot"]
    most = max(len(s.get("files") or ()) for s in snaps)
    assert 0 < most <= 10, most
    docs = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    last = [d for d in docs if "job" in d][-1]
    assert last["job"]["state"] == "finished", last["job"]


MANY = 9000  # the objects of the `many` database


def _followed(res: subprocess.CompletedProcess[str], major: int, more: int = 0
              ) -> tuple[list[dict], list[tuple], int, list[dict]]:
    """A followed run of the table and MANY objects (`run --json`): its
    documents, their trace, its items (the table and the objects' items:
    one before 17, one a 1000 from 17, and `more`) and the documents of while only
    the objects were written (the limit said so, and a worker's row)."""
    assert res.returncode == 0, res.stderr
    docs = [d for d in (json.loads(ln) for ln in res.stdout.splitlines()
                        if ln.startswith("{")) if "job" in d]
    trace = [(d["job"]["state"], d["job"]["items_done"], d["job"]["items_total"],
              d["job"]["progress"], d["job"]["eta_s"], d["bottleneck"]["kind"]) for d in docs]
    planned = [d for d in docs if d["job"]["items_total"]]
    assert planned, trace
    total = planned[-1]["job"]["items_total"]
    assert total == 1 + (1 if major < 17 else -(-MANY // 1000)) + more, trace
    during = [d for d in planned if d["job"]["state"] == "running"
              and d["bottleneck"]["kind"] == "large-objects"]
    assert during, trace
    # the session that moves them says so in its row, not "idle"
    phases = [[w["phase"] for w in d["workers"]] for d in during]
    assert any("large-objects" in p for p in phases), phases
    return docs, trace, total, during


@pytest.fixture(scope="module")
def many(cluster: Cluster) -> str:
    """A database of MANY objects and a small table: a dump's objects take
    a few seconds, long enough for the live view's rates (3 s of history),
    and a restore's data items (at 17, a batch of 1000 in 0.15 s here) outlast
    the plan's first reading of the archive under a loaded CI (it once came
    after all six batches of 6000 objects had run)."""
    cluster.psql("CREATE DATABASE los_many")
    cluster.psql("SELECT lo_from_bytea(0, convert_to(repeat(md5(g::text), 60), 'UTF8')) "
                 f"FROM generate_series(1, {MANY}) g; CREATE TABLE t AS SELECT g AS id, "
                 "md5(g::text) AS v FROM generate_series(1, 20000) g", dbname="los_many")
    cluster.psql("VACUUM ANALYZE", dbname="los_many")
    return "los_many"


@pytest.mark.integration
@pytest.mark.parametrize("major", [15, 17])
def test_a_followed_dump_counts_its_large_objects(cluster: Cluster, many: str, tmp_path: Path,
                                                  major: int) -> None:
    """pg_dump writes the objects after the tables: the live view keeps
    them as items (one before 17, one a batch of 1000 from 17), runs one
    while its list file is open and counts its objects by the files
    written, so the dump is not "all done" while it writes them: its
    progress climbs, the limit names them, no ETA says nothing is left;
    at the end every item is done."""
    bindir = Path(cluster.client("pg_dump")).parent if major == 15 else bindir_for(major)
    arch = tmp_path / "a"
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                      str(bindir / "pg_dump"), "-Fd", "-j", "2", "-f",
                                      str(arch), many),
                         capture_output=True, text=True, timeout=300, env=cluster.env())
    docs, trace, total, during = _followed(res, major)
    fractions = [d["job"]["progress"] for d in during]
    assert 0 < min(fractions) < 1 and len(set(fractions)) > 1 or len(during) == 1, trace
    assert f"of {MANY} done" in during[-1]["bottleneck"]["detail"], during[-1]["bottleneck"]
    # never "nothing left" while much of them is (an ETA comes once the run
    # has 3 s of history at their pace: how many samples that leaves depends
    # on the machine, so it is not asked for here; near their end it may
    # round to 0)
    assert all(d["job"]["eta_s"] != 0 for d in during if d["job"]["progress"] < 0.9), trace
    if major < 17:
        assert "one worker does them all" in during[-1]["bottleneck"]["detail"]
    end = docs[-1]["job"]
    assert end["state"] == "finished" and end["items_done"] == total, trace


@pytest.mark.integration
@pytest.mark.parametrize("major,fmt", [(15, "d"), (17, "d"), (15, "c")])
def test_a_followed_restore_counts_its_large_objects(cluster: Cluster, many: str,
                                                     tmp_path: Path, major: int,
                                                     fmt: str) -> None:
    """pg_restore -j writes an archive's objects in items of their own
    (one before 17, one a batch of 1000 from 17), after the tables: the
    live view keeps them as items, so the restore is not "all done" while
    it writes them. A -Fd archive's item runs while a worker holds its list
    of objects open, and how far it is comes from where the worker reads
    that list; a custom archive's (one file) while a session writes
    objects, how far from where the worker reads the item's extent of the
    archive. At the end every item is done."""
    bindir = Path(cluster.client("pg_dump")).parent if major == 15 else bindir_for(major)
    arch = tmp_path / "a"
    subprocess.run([str(bindir / "pg_dump"), f"-F{fmt}", "-f", str(arch), many],
                   env=cluster.env(), check=True, capture_output=True)
    # pg_dump 17's archive sets what a 15 server does not know: a 17 target
    with (start_cluster(bindir=bindir, prefix="pgparmon-lo17-") if major == 17
          else nullcontext(cluster)) as target:
        target.psql(f"DROP DATABASE IF EXISTS los_r{major}")
        target.psql(f"CREATE DATABASE los_r{major}")
        res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                          str(bindir / "pg_restore"), "-j", "2", "-d",
                                          f"los_r{major}", str(arch)),
                             capture_output=True, text=True, timeout=300, env=target.env())
    # and their metadata, which the pre-data creates
    docs, trace, total, during = _followed(res, major, more=1)
    fractions = [d["job"]["progress"] for d in during]
    assert all(f < 1 for f in fractions), trace
    # how far: from the list's reading (-Fd), from where the worker reads
    # the item's extent of the archive (-Fc)
    assert len(during) == 1 or len(set(fractions)) > 1, trace
    assert f"of {MANY} done" in during[-1]["bottleneck"]["detail"], during[-1]["bottleneck"]
    assert "pg_restore creates each one" in during[-1]["bottleneck"]["detail"]
    end = docs[-1]["job"]
    assert end["state"] == "finished" and end["items_done"] == total, trace
