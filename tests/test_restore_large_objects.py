"""A restore's large objects in the live plan (jobs/pg_restore.py,
jobs/large_objects.py), on hand-made archives and snapshots: the lists of
objects read from a sample of their files, how far a worker is from where
it reads a list or the object it holds, and the end settled from
pg_largeobject's live rows when no exit status says."""

from __future__ import annotations

import dataclasses
import gzip
import random
from pathlib import Path
from typing import Any

import pytest

from pgparmon.analyze.items import Item, WorkerState
from pgparmon.analyze.progress import Tracker
from pgparmon.job_end import JobEnd
from pgparmon.jobs.base import Job, state_of
from pgparmon.jobs.large_objects import (
    LIST_READ_AHEAD,
    LO_ITEM,
    RESTORE_OBJECT_BYTES,
    RESTORE_PRE_DATA_SHARE,
    Listing,
    archive_listings,
    metadata_listing,
    read_listing,
)
from pgparmon.cmdline import parse_client_cmdline
from pgparmon.jobs.pg_restore import (
    LO_META_KEY,
    LO_PAGES_IN,
    PgRestore,
    RestoreState,
    _plan_large_objects,
    file_per_text,
)
from pgparmon.jobs.registry import driver_for
from pgparmon.snapshot import ClientProc, DbSample, OpenFile, Snapshot
from pgparmon.toc import TocItem


def _archive(tmp: Path, sizes: list[int], first: int = 16385, step: int = 1,
             gz: bool = False) -> Path:
    """A -Fd archive's objects: blob_OID.dat(.gz) files of `sizes` bytes of
    text and their list, blobs.toc."""
    lines = []
    for i, size in enumerate(sizes):
        oid = first + i * step
        data = b"x" * size
        name = f"blob_{oid}.dat"
        if gz:
            (tmp / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (tmp / name).write_bytes(data)
        lines.append(f"{oid} {name}\n")
    (tmp / "blobs.toc").write_text("".join(lines))
    return tmp


def test_a_list_is_read_whole_when_short(tmp_path: Path) -> None:
    sizes = [100 * (i % 7) + 5000 * (i % 3) for i in range(300)]
    arch = _archive(tmp_path, sizes, gz=True)
    li = read_listing(str(arch), str(arch / "blobs.toc"), "42")
    assert (li.key, li.count) == ("42", 300)
    assert li.bytes == pytest.approx(sum(sizes))  # the gzip members' own sizes
    assert li.pages == sum(-(-s // 2048) for s in sizes)
    assert li.list_bytes == (arch / "blobs.toc").stat().st_size
    oids = [m[1] for m in li.marks]
    assert oids == sorted(oids) and li.marks[0] == (0, 16385) and li.marks[-1] == (299, 16684)


def test_a_long_list_is_sized_from_a_spread_sample(tmp_path: Path) -> None:
    # 5000 objects of 1 to 4 kB: a sample of every second file sees about
    # the same mix
    rnd = random.Random(5)
    sizes = [rnd.randint(1024, 4096) for _ in range(5000)]
    arch = _archive(tmp_path, sizes)
    li = read_listing(str(arch), str(arch / "blobs.toc"), "1", sample=2000)
    assert li.count == 5000
    assert li.bytes == pytest.approx(sum(sizes), rel=0.03)
    assert li.pages == pytest.approx(sum(-(-s // 2048) for s in sizes), rel=0.03)
    assert li.bytes != sum(sizes)  # from the sample, not every file


def test_an_archive_of_many_lists_is_sized_from_one_sample(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """pg_dump 17 lists its objects in items of 1000: a million objects are
    a thousand lists, and sizing each from its own files read them all.
    One sample of LIST_SAMPLE files spreads over all the lists together;
    each list's figure is its own few files' mean drawn towards the
    archive's, and the total stays right."""
    import pgparmon.jobs.large_objects as lo
    rnd = random.Random(7)
    toc, truth, oid = [], [], 16385
    for k in range(20):  # 20 lists of 60 objects, the later lists larger
        sizes = [rnd.randint(500, 1500) + 80 * k for _ in range(60)]
        lines = []
        for size in sizes:
            (tmp_path / f"blob_{oid}.dat").write_bytes(b"x" * size)
            lines.append(f"{oid} blob_{oid}.dat\n")
            oid += 1
        (tmp_path / f"blobs_{5000 + k}.toc").write_text("".join(lines))
        toc.append(TocItem(5000 + k, 0, 0, "BLOBS", None, f"{oid - 60}..{oid - 1}", None))
        truth.append(sum(sizes))
    read = []
    real = lo.text_bytes
    monkeypatch.setattr(lo, "text_bytes", lambda path, size: read.append(path) or real(path, size))
    monkeypatch.setattr(lo, "LIST_SAMPLE", 240)
    lists = archive_listings(str(tmp_path), toc)
    assert len(read) <= 240 and len({Path(p).name for p in read}) == len(read)
    assert [li.count for li in lists] == [60] * 20
    assert sum(li.bytes or 0 for li in lists) == pytest.approx(sum(truth), rel=0.03)
    # a list's own objects weigh: the first lists read smaller than the last
    assert lists[0].bytes < lists[-1].bytes
    assert all(li.marks and li.list_bytes > 0 for li in lists)
    # an archive of no more objects than the sample is read whole: exact
    read.clear()
    monkeypatch.setattr(lo, "LIST_SAMPLE", 1200)
    lists = archive_listings(str(tmp_path), toc)
    assert len(read) == 1200 and [li.bytes for li in lists] == truth


def test_the_place_of_an_object_in_its_list(tmp_path: Path) -> None:
    arch = _archive(tmp_path, [10] * 1000, first=20000, step=3)
    li = read_listing(str(arch), str(arch / "blobs.toc"), "1")
    # OIDs 20000, 20003, ...: the object at 500 is OID 21500
    assert li.place(21500) == pytest.approx(500, abs=1)
    assert li.place(20000) == 0 and li.place(22997) == pytest.approx(999)
    assert li.place(19999) is None and li.place(30000) is None
    # a list out of OID order keeps no marks: no place
    (arch / "blobs.toc").write_text("".join(f"{o} blob_{o}.dat\n" for o in (20003, 20000)))
    assert read_listing(str(arch), str(arch / "blobs.toc"), "1").place(20000) is None


def test_a_list_read_a_buffer_ahead_counts_what_is_surely_done() -> None:
    li = Listing("1", count=10000, list_bytes=220000)
    assert li.read_to(LIST_READ_AHEAD) == 0 and li.read_to(0) == 0
    assert li.read_to(110000 + LIST_READ_AHEAD) == pytest.approx(5000)
    assert Listing("1", count=10).read_to(5000) == 0  # no list: nothing said


def test_the_tables_compression_converts_the_objects_work(tmp_path: Path) -> None:
    text = b"".join(b"%d\tsome text of a row\n" % i for i in range(20000))
    (tmp_path / "3001.dat.gz").write_bytes(gzip.compress(text))
    files = {"3001": (str(tmp_path / "3001.dat.gz"), float((tmp_path / "3001.dat.gz")
                                                          .stat().st_size)),
             "3002": (None, 1.0)}
    c = file_per_text(files)
    assert c == pytest.approx(files["3001"][1] / len(text))
    assert file_per_text({"1": (None, 1.0)}) == 1.0


def _restore(args: Any = None) -> Tracker:
    job = Job(kind="pg_restore", database="shop", client_pid=100, jobs=2, usename="loader",
              target="/arch", args=args)
    tr = Tracker(job, driver_for(job.kind))
    tr.add(Item(key="3001", kind="data", relation="public.t", name="public.t", size=1e6,
                work=1e6))
    return tr


def _listings(*lis: Listing, file_per_text: float = 0.25) -> dict[str, Any]:
    return {"large_objects": [dataclasses.asdict(li) for li in lis],
            "file_per_text": file_per_text}


def _snap(t: float, files: tuple[OpenFile, ...] = (), code: int | None = None,
          alive: bool = True) -> Snapshot:
    procs = (ClientProc(100, None, "pg_restore", None, "sleeping", 0.0, 0.0, 0, 0, ()),
             ClientProc(101, 100, "pg_restore", None, "sleeping", 0.0, 0.0, 0, 0, files))
    return Snapshot(ts=t, wall=1000.0 + t, db=DbSample(server_ts=t, backends=()), host=None,
                    clients=procs if alive else (), root_alive=alive, exit_code=code)


def test_a_directory_archives_item_runs_while_its_list_is_open(tmp_path: Path) -> None:
    """Planned with its work in archive bytes; running while a worker holds
    blobs.toc, as far as its read position or the object file it holds
    says; done once no worker holds the list."""
    arch = _archive(tmp_path, [3000] * 2000)
    li = read_listing(str(arch), str(arch / "blobs.toc"), "4000")
    tr = _restore()
    _plan_large_objects(tr, _listings(li), None)
    it = tr.items["4000"]
    # sized as pg_restore hands it out: its list x 1024
    assert it.kind == LO_ITEM.name and it.reltuples == 2000 and it.size == li.list_bytes * 1024
    # 2000 objects of 57 kB of table heap each, 1.28x their 3 kB: in heap
    # bytes, then the file's bytes a heap byte (text ratio x compression)
    heap = 2000 * 57e3 + 2000 * 3000 * 1.28
    assert it.work == pytest.approx(heap * tr.text_ratio * 0.25)
    toc = str(arch / "blobs.toc")
    drv = tr.driver
    drv.file_evidence(tr, _snap(1, (OpenFile(toc, li.list_bytes / 2 + LIST_READ_AHEAD, "r"),)),
                      {})
    assert it.state == "running" and it.fraction == pytest.approx(0.5, abs=0.01)
    # a large object's file held: its place (OID 16385 + 1500)
    drv.file_evidence(tr, _snap(2, (OpenFile(toc, li.list_bytes / 2 + LIST_READ_AHEAD, "r"),
                                    OpenFile(str(arch / "blob_17885.dat"), 0, "r"))), {})
    assert it.fraction == pytest.approx(0.75, abs=0.01)
    # never back, and never done while the list is held
    drv.file_evidence(tr, _snap(3, (OpenFile(toc, 0, "r"),)), {})
    assert it.state == "running" and it.fraction == pytest.approx(0.75, abs=0.01)
    drv.file_evidence(tr, _snap(4), {})
    assert it.state == "done"


class Catalog:
    """The end's context: pg_largeobject's live rows as the statistics say."""

    target_dir = "/arch"

    def __init__(self, pages: float | None) -> None:
        self.pages = pages

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        return {"loaded": ["public.t"], "large_object_pages": self.pages}

    def final_files(self) -> Any:
        return ()

    def may_ask_again(self, kind: str) -> bool:
        return False

    def pause(self, seconds: float) -> None:
        pass


@pytest.mark.parametrize("pages,state", [(1000.0, "finished"), (LO_PAGES_IN * 1000, "finished"),
                                         (700.0, "failed"), (None, "failed")])
def test_the_end_without_an_exit_status_asks_pg_largeobject(pages: float | None,
                                                             state: str) -> None:
    """Items that ran between two samples (never seen): with no exit
    status, done when pg_largeobject holds their pages."""
    tr = _restore()
    lis = [Listing(str(k), count=500, bytes=1e6, pages=500.0, list_bytes=11000)
           for k in (4001, 4002)]
    _plan_large_objects(tr, _listings(*lis), None)
    tr.planned = True
    end = JobEnd(tr.job, lambda s: None)
    assert end.check(tr, _snap(1), Catalog(pages)) is None
    out = end.check(tr, _snap(2, alive=False), Catalog(pages))
    assert out is not None and out.state == state, out
    assert (tr.items["4001"].state == "done") == (state == "finished")


def _worker(pid: int, state: str, query: str, item: str | None = None) -> WorkerState:
    return WorkerState(pid=pid, phase="idle", state=state, query=query, item=item)


def test_a_custom_archives_items_follow_the_sessions_that_write_objects() -> None:
    tr = _restore()
    lis = [Listing(str(k), count=1000) for k in (4001, 4002, 4003)]
    _plan_large_objects(tr, _listings(*lis, file_per_text=1.0), None)
    drv = tr.driver
    lookup = ("select proname, oid from pg_catalog.pg_proc where proname in ('lo_open', "
              "'lo_close')")
    tr.workers = {7: _worker(7, "fastpath function call", lookup),
                  8: _worker(8, "active", "COPY public.t FROM stdin", item="3001")}
    drv.file_evidence(tr, _snap(1), {})
    assert [tr.items[k].state for k in ("4001", "4002", "4003")] == ["running", "pending",
                                                                     "pending"]
    tr.workers[8] = _worker(8, "idle in transaction", "BEGIN")
    drv.file_evidence(tr, _snap(2), {})
    assert [tr.items[k].state for k in ("4001", "4002", "4003")] == ["running", "running",
                                                                     "pending"]
    # one session left writing: the longest running is done, one runs
    tr.workers[7] = _worker(7, "idle", "COMMIT")
    drv.file_evidence(tr, _snap(3), {})
    assert [tr.items[k].state for k in ("4001", "4002", "4003")] == ["done", "running",
                                                                     "pending"]


def test_a_custom_archives_item_is_as_far_as_its_worker_reads_its_extent() -> None:
    """With its data's extent in the archive (custom_archive.py), a running
    item of objects is as far as the worker that reads it."""
    tr = _restore()
    _plan_large_objects(tr, _listings(Listing("4001", count=1000), file_per_text=1.0), None)
    st = state_of(tr, RestoreState)
    st.extents, st.archive = {"4001": (5000, 4000)}, "/arch/a.dump"
    lookup = ("select proname, oid from pg_catalog.pg_proc where proname in ('lo_open', "
              "'lo_close')")
    tr.workers = {7: _worker(7, "fastpath function call", lookup)}
    at = _snap(1, (OpenFile("/arch/a.dump", 8000, "r"),))
    tr.driver.file_evidence(tr, at, {})
    it = tr.items["4001"]
    assert it.state == "running" and it.fraction == pytest.approx(0.75)


def test_in_one_transaction_a_begin_says_nothing_of_large_objects() -> None:
    """pg_restore --single-transaction: the BEGIN is the run's, not an
    item's of large objects; a fastpath call still is one."""
    tr = _restore(parse_client_cmdline(["pg_restore", "-1", "-d", "shop", "a.dump"],
                                       PgRestore.client_specs))
    _plan_large_objects(tr, _listings(Listing("4001", count=1000), file_per_text=1.0), None)
    tr.workers = {7: _worker(7, "idle in transaction", "BEGIN")}
    tr.driver.file_evidence(tr, _snap(1), {})
    assert tr.items["4001"].state == "pending"
    tr.workers = {7: _worker(7, "fastpath function call", "BEGIN")}
    tr.driver.file_evidence(tr, _snap(2), {})
    assert tr.items["4001"].state == "running"


def _toc(*entries: tuple[int, str, str]) -> list[TocItem]:
    return [TocItem(dump_id=d, catalog_oid=0, oid=0, desc=desc, schema=None, tag=tag,
                    owner="postgres") for d, desc, tag in entries]


def test_the_objects_metadata_is_listed_from_the_toc() -> None:
    # before 17: a BLOB entry an object, its tag the OID
    before = metadata_listing(_toc(*((10 + i, "BLOB", str(16385 + 2 * i)) for i in range(500)),
                                   (900, "BLOBS", "BLOBS")), "m")
    assert before is not None and before.count == 500
    assert before.place(16385 + 2 * 250) == pytest.approx(250, abs=1)
    # from 17: a BLOB METADATA entry a range of up to 1000
    after = metadata_listing(_toc((10, "BLOB METADATA", "16385..17384"),
                                  (11, "BLOB METADATA", "17385..17884"),
                                  (900, "BLOBS", "16385..17384")), "m")
    assert after is not None and after.count == 1500
    assert after.place(16385) == 0 and after.place(17385) == 1000
    assert after.place(17635) == pytest.approx(1250)
    assert metadata_listing(_toc((1, "TABLE", "t")), "m") is None


def test_the_pre_data_creates_the_objects_one_by_one_before_any_worker() -> None:
    """Planned with the pre-data's share of an object's fixed cost (the
    data item keeps the rest), every data item waiting for it; running
    while the leader's session creates objects, active or idle after one,
    as far as the OID's place; never done by being unseen; done once any
    other item runs."""
    meta = Listing(LO_META_KEY, 2000, marks=((0, 20000), (1999, 21999)))
    lis = Listing("4000", count=2000, bytes=2000 * 3000.0, list_bytes=40000)
    tr = _restore()
    extra = {**_listings(lis), "lo_metadata": dataclasses.asdict(meta)}
    _plan_large_objects(tr, extra, None)
    m, it = tr.items[LO_META_KEY], tr.items["4000"]
    scale = tr.text_ratio * 0.25
    assert m.work == pytest.approx(2000 * RESTORE_OBJECT_BYTES * RESTORE_PRE_DATA_SHARE * scale)
    assert it.work == pytest.approx((2000 * RESTORE_OBJECT_BYTES * (1 - RESTORE_PRE_DATA_SHARE)
                                     + 2000 * 3000 * 1.28) * scale)
    assert LO_META_KEY in it.deps and LO_META_KEY in tr.items["3001"].deps
    drv = tr.driver
    tr.workers = {7: _worker(7, "active", "SELECT pg_catalog.lo_create('20500');")}
    drv.file_evidence(tr, _snap(1), {})
    assert m.state == "running" and m.fraction == pytest.approx(0.25, abs=0.01)
    assert tr.workers[7].phase == "large-objects"
    v = drv.verdict(tr, _snap(1), {})
    assert v is not None and v.kind == "large-objects" and "about 500 of 2000" in v.detail
    tr.workers = {7: _worker(7, "idle", "ALTER LARGE OBJECT 21000 OWNER TO loader;")}
    drv.file_evidence(tr, _snap(2), {})
    assert m.fraction == pytest.approx(0.5, abs=0.01)
    assert not drv.done_when_unseen(tr, m, _snap(2), set())
    # the workers start: the pre-data has ended
    tr.set_state(tr.items["3001"], "running")
    drv.file_evidence(tr, _snap(3), {})
    assert m.state == "done"
